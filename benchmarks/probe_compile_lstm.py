"""Does ``torch.compile`` (inductor, CPU) pay for an LSTM training step of the headline run's shape?

Usage::

    python benchmarks/probe_compile_lstm.py

One member, one thread, the config's median training batch (7 strings x 17 positions, hidden
124): a Python LSTM (input products at once, then the recurrence step by step) forward +
backward, eager and compiled, against ``nn.LSTM`` (oneDNN's fused kernel, what the shipped
model and the loop engine run). Prints median ms per step (wall, CPU of this process) and
the first compiled call's time (the compilation; inductor's compile workers are other
processes, so its CPU time here is a lower bound).
"""
import time, torch, statistics
torch.set_num_threads(1)
H, R, T = 124, 7, 17
def step(x, w_ih, w_hh, b):
    h = x.new_zeros(R, H); c = x.new_zeros(R, H)
    xs = x @ w_ih.t() + b
    outs = []
    for t in range(T):
        g = xs[:, t] + h @ w_hh.t()
        i, f, gg, o = g.chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs, 1).square().mean()
def fwd_bwd(fn, args):
    loss = fn(*args); loss.backward()
args = [torch.randn(R, T, H), torch.randn(4*H, H, requires_grad=True), torch.randn(4*H, H, requires_grad=True), torch.zeros(4*H, requires_grad=True)]
def bench(fn, n=30):
    ws=[]; cs=[]
    for _ in range(n):
        w=time.perf_counter(); c=time.process_time(); fwd_bwd(fn, args); ws.append(time.perf_counter()-w); cs.append(time.process_time()-c)
    return statistics.median(ws)*1e3, statistics.median(cs)*1e3
print("eager ms/step wall, cpu:", bench(step))
compiled = torch.compile(step)
w=time.perf_counter(); c=time.process_time(); fwd_bwd(compiled, args); print(f"first compiled call (compile): wall {time.perf_counter()-w:.1f}s cpu {time.process_time()-c:.1f}s")
print("compiled ms/step wall, cpu:", bench(compiled))
lstm = torch.nn.LSTM(H, H, batch_first=True)
def onednn(x, *_):
    return lstm(x)[0].square().mean()
print("nn.LSTM (oneDNN) ms/step wall, cpu:", bench(onednn))
