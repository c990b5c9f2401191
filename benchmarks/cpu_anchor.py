"""The physical anchor of the CPU benchmarks: FLOPs of a run and the CPU's matrix-product rate.

Used by ``benchmarks/bench_cpu_grid.py`` (not a test, not part of the package; the removed
``profile_cpu_run.py`` also counted padded positions with it, last at commit 09df9df).

FLOPs are counted analytically as multiply-adds x 2 of the networks' matrix products
(elementwise work, softmax, layer norms and the optimizer are not counted), on real
positions only (:func:`useful_flops`):

* LSTM, per position, forward: ``L * 2 * 4H * (H + H) + 2 * H * C`` (input and recurrent
  products of every layer, output layer; the embedding is a lookup).
* transformer, per position, forward: ``L * (2 * 4 d^2 + 2 * 2 d f) + 2 d C``, plus per string of
  ``n`` positions ``L * 2 * 2 * d * n (n + 1) / 2`` for the causal attention products.
* training = 3 x forward (the backward of a product is two products), evaluation = forward.

The matrix-product rate is ``torch.mm`` in float32 on this process's threads, median of
repeats: a large square (1024) and the run's own shapes (LSTM: ``[rows, H] x [H, 4H]``, one
time step of the recurrence; transformer: ``[rows*T, d] x [d, f]``).
"""

from __future__ import annotations

import statistics
import time

import torch

__all__ = ["useful_flops", "mm_rate", "net_dims"]


def net_dims(model: torch.nn.Module) -> dict:
    """The sizes the FLOP count needs, read off a LanguageModel (``model.net``)."""
    net = model.net
    if hasattr(net, "lstm"):
        lstm = net.lstm
        return {"kind": "lstm", "H": lstm.hidden_size, "L": lstm.num_layers,
                "C": net.output.out_features}
    layer = net.layers.layers[0]
    return {"kind": "transformer", "d": net.d_model, "f": layer.linear1.out_features,
            "L": len(net.layers.layers), "C": net.output.out_features}


def mm_rate(m: int, k: int, n: int, repeats: int = 7, min_time: float = 0.05) -> dict:
    """float32 ``torch.mm`` of ``[m, k] x [k, n]``: GFLOP/s by wall and by CPU time (medians)."""
    a, b = torch.randn(m, k), torch.randn(k, n)
    flops = 2.0 * m * k * n
    torch.mm(a, b)
    inner = 1
    while True:  # enough products per repeat to be timed
        t = time.perf_counter()
        for _ in range(inner):
            torch.mm(a, b)
        if time.perf_counter() - t > min_time or inner > 1 << 16:
            break
        inner *= 4
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        for _ in range(inner):
            torch.mm(a, b)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {
        "shape": f"[{m},{k}]x[{k},{n}]",
        "gflops_wall": flops * inner / statistics.median(walls) / 1e9,
        "gflops_cpu": flops * inner / max(statistics.median(cpus), 1e-9) / 1e9,
    }


def useful_flops(dims: dict, positions: torch.Tensor) -> float:
    """Forward FLOPs on real positions only: strings of ``positions[k]`` positions each.

    The per-position products of the module docstring; the transformer's attention counted
    causally on each string alone (``L * 2 * 2 * d * n (n + 1) / 2``), no padding.
    """
    n = positions.to(torch.float64)
    total = float(n.sum())
    if dims["kind"] == "lstm":
        h, layers, c = dims["H"], dims["L"], dims["C"]
        return total * (layers * 2 * 4 * h * 2 * h + 2 * h * c)
    d, f, layers, c = dims["d"], dims["f"], dims["L"], dims["C"]
    dense = total * (layers * (2 * 4 * d * d + 2 * 2 * d * f) + 2 * d * c)
    return dense + float((n * (n + 1) / 2).sum()) * layers * 4 * d
