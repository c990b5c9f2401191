"""Prototype: dropout's mask from split 64-bit draws against ``F.dropout`` on the CPU.

Usage::

    python benchmarks/probe_dropout_mask.py

On the stacked transformer's shapes at the grid's probe batch (``[4, 8, 29]`` packed, d 68,
feed-forward 321, 4 heads), one thread: forward + backward of ``F.dropout(x, 0.1)`` against a
mask made from two 32-bit uniforms per 64-bit ``random_()`` draw, kept when
``u >= round(p * 2^32)`` (drop probability within 2^-33 of ``p``), applied as
``x * mask / (1 - p)``. Prints CPU microseconds per call (medians of 9 blocks of 100) and the
measured drop rate of the prototype. Not used by the package (docs/benchmarks_cpu.md says why).
"""

import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
P = 0.1


def cpu_us(fn, reps: int = 100, blocks: int = 9) -> float:
    times = []
    for _ in range(blocks):
        start = time.process_time()
        for _ in range(reps):
            fn()
        times.append((time.process_time() - start) / reps * 1e6)
    return statistics.median(times)


def split_mask(shape: tuple[int, ...], p: float) -> torch.Tensor:
    n = 1
    for size in shape:
        n *= size
    draws = torch.empty((n + 1) // 2, dtype=torch.int64).random_()
    # random_() on int64 covers [0, 2^63): the low 32 bits are uniform, the high 31 bits too,
    # so both halves are compared as unsigned 31/32-bit values below (no sign bit involved)
    low = (draws & 0xFFFFFFFF)
    high = (draws >> 32) & 0x7FFFFFFF
    keep_low = low >= round(p * 2**32)
    keep_high = high >= round(p * 2**31)
    return torch.stack([keep_low, keep_high], -1).reshape(-1)[:n].view(shape)


def main() -> None:
    torch.manual_seed(0)
    print(f"p = {P}, one thread, CPU µs per forward + backward (medians of 9 blocks of 100)")
    print("| activation | F.dropout | split 64-bit draws | ratio |\n|---|---|---|---|")
    for name, shape in (("feed-forward", (4, 232, 321)), ("residual", (4, 232, 68)),
                        ("attention weights", (32, 4, 29, 29))):
        x = torch.randn(shape, requires_grad=True)
        grad = torch.ones(shape)

        def reference():
            F.dropout(x, P, True).backward(grad)

        def split():
            mask = split_mask(shape, P).to(x.dtype).mul_(1 / (1 - P))
            (x * mask).backward(grad)

        a, b = cpu_us(reference), cpu_us(split)
        print(f"| {name} `{list(shape)}` | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
    kept = split_mask((4_000_000,), P).double().mean().item()
    print(f"prototype drop rate over 4,000,000 draws: {1 - kept:.5f} (p = {P})")


if __name__ == "__main__":
    main()
