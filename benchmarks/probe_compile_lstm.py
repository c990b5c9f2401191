"""Does ``torch.compile`` (inductor, CPU) pay for an LSTM training step of the headline run's shape?

Usage::

    python benchmarks/probe_compile_lstm.py               # one member
    python benchmarks/probe_compile_lstm.py --members 4   # 4 members stacked (bmm per time step)

One thread, the config's median training batch (7 strings x 17 positions, hidden 124): a
Python LSTM (input products at once, then the recurrence step by step) forward + backward,
eager and compiled, against ``nn.LSTM`` (oneDNN's fused kernel, what the shipped model and the
loop engine run; with ``--members M``, M such calls one after the other). With M members the
Python LSTM holds ``[M, ...]`` weights and does one batched product per time step. Prints
median ms per step (wall, CPU of this process) and the first compiled call's time (the
compilation; inductor's compile workers are other processes, so its CPU time here is a lower
bound).
"""

import argparse
import statistics
import time

import torch

torch.set_num_threads(1)
H, R, T = 124, 7, 17


def step(x, w_ih, w_hh, b):
    """``x [M, R, T, H]``, ``w_* [M, 4H, H]``, ``b [M, 1, 4H]``: mean squared hidden state."""
    m = x.shape[0]
    h = x.new_zeros(m, R, H)
    c = x.new_zeros(m, R, H)
    xs = (x.reshape(m, R * T, H) @ w_ih.transpose(1, 2) + b).view(m, R, T, 4 * H)
    outs = []
    for t in range(T):
        g = xs[:, :, t] + h @ w_hh.transpose(1, 2)
        i, f, gg, o = g.chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs, 2).square().mean()


def bench(fn, args, n=30):
    walls, cpus = [], []
    for _ in range(n):
        w, c = time.perf_counter(), time.process_time()
        fn(*args).backward()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return f"{statistics.median(walls) * 1e3:.2f} ms wall, {statistics.median(cpus) * 1e3:.2f} ms CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=1)
    m = parser.parse_args().members
    args = [torch.randn(m, R, T, H), torch.randn(m, 4 * H, H, requires_grad=True),
            torch.randn(m, 4 * H, H, requires_grad=True), torch.zeros(m, 1, 4 * H, requires_grad=True)]
    print(f"members {m}, batch {R} x {T}, hidden {H}, 1 thread")
    print("python LSTM, eager:   ", bench(step, args))
    compiled = torch.compile(step)
    w, c = time.perf_counter(), time.process_time()
    compiled(*args).backward()
    print(f"first compiled call:   {time.perf_counter() - w:.1f} s wall, {time.process_time() - c:.1f} s CPU")
    print("python LSTM, compiled:", bench(compiled, args))
    lstms = [torch.nn.LSTM(H, H, batch_first=True) for _ in range(m)]

    def onednn(x, *_):
        return sum(lstm(x[k])[0].square().mean() for k, lstm in enumerate(lstms))

    print(f"nn.LSTM (oneDNN) x {m}: ", bench(onednn, args))


if __name__ == "__main__":
    main()
