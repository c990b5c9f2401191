"""Prototype: where an ensemble LSTM tick's CPU time goes, per member or batched around oneDNN.

Usage::

    python benchmarks/probe_lstm_hybrid.py --members 4

One thread; M members of the headline LSTM (hidden 124, 13 token ids, 11 classes), each on a
batch of the config's median training shape (7 strings x 17 positions), KL loss to random
target distributions, dropout 0.1, forward + backward + per-member clipping + Adam:

* ``loop``: what the CPU's loop engine does: member after member, embedding, dropout,
  ``torch.lstm`` (oneDNN), dropout, output layer, log-softmax, KL, ``autograd.grad``;
* ``hybrid``: everything but the recurrence batched over the members (one embedding gather, one
  dropout, one batched output product, one log-softmax and KL, one backward), the recurrence
  still oneDNN's ``torch.lstm``, one call per member;
* ``lstm only``: the M ``torch.lstm`` forward + backward calls alone (the kernel's share).

Both training variants then clip each member's gradient to norm 5 and take one Adam step on
the stacked ``[M, P]`` parameter (``torch._foreach``-free, plain tensor ops). Prints median ms
per tick (wall, CPU) and per member. A measured prototype, not the engine: the packing of
real batches (different shapes per member) is not modelled.
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
H, R, T, V, C = 124, 7, 17, 13, 11


def make(m):
    g = torch.Generator().manual_seed(0)
    p = {
        "emb": torch.randn(m, V, H, generator=g) * 0.1,
        "w_ih": torch.randn(m, 4 * H, H, generator=g) * 0.09,
        "w_hh": torch.randn(m, 4 * H, H, generator=g) * 0.09,
        "b_ih": torch.zeros(m, 4 * H), "b_hh": torch.zeros(m, 4 * H),
        "out_w": torch.randn(m, C, H, generator=g) * 0.09, "out_b": torch.zeros(m, C),
    }
    for v in p.values():
        v.requires_grad_(True)
    ids = torch.randint(0, V, (m, R, T), generator=g)
    target = torch.softmax(torch.randn(m, R, T, C, generator=g), -1)
    mask = torch.ones(m, R, T, dtype=torch.bool)
    return p, ids, target, mask


def lstm(x, p, k):
    h0 = x.new_zeros(1, x.shape[0], H)
    out, _, _ = torch.lstm(x, (h0, h0), [p["w_ih"][k], p["w_hh"][k], p["b_ih"][k], p["b_hh"][k]],
                           True, 1, 0.0, True, False, True)
    return out


def kl(log_probs, target, mask):
    t = target.clamp_min(1e-30)
    return ((target * (t.log() - log_probs)).sum(-1) * mask).sum() / log_probs.shape[-3]


def loop_tick(p, ids, target, mask):
    m = ids.shape[0]
    grads = []
    for k in range(m):
        leaves = {n: v[k].detach().requires_grad_(True) for n, v in p.items()}
        x = F.dropout(F.embedding(ids[k], leaves["emb"]), 0.1, True)
        h0 = x.new_zeros(1, R, H)
        out, _, _ = torch.lstm(x, (h0, h0), [leaves["w_ih"], leaves["w_hh"], leaves["b_ih"],
                                             leaves["b_hh"]], True, 1, 0.0, True, False, True)
        logits = F.linear(F.dropout(out, 0.1, True), leaves["out_w"], leaves["out_b"])
        loss = kl(torch.log_softmax(logits, -1), target[k], mask[k])
        grads.append(torch.autograd.grad(loss, list(leaves.values())))
    return [torch.stack([g[i] for g in grads]) for i in range(len(p))]


def hybrid_tick(p, ids, target, mask):
    m = ids.shape[0]
    rows = torch.arange(m)[:, None, None]
    x = F.dropout(p["emb"][rows, ids], 0.1, True)  # [M, R, T, H]
    out = torch.stack([lstm(x[k], p, k) for k in range(m)])
    hidden = F.dropout(out, 0.1, True).reshape(m, R * T, H)
    logits = torch.baddbmm(p["out_b"][:, None], hidden, p["out_w"].transpose(1, 2))
    loss = kl(torch.log_softmax(logits.view(m, R, T, C), -1), target, mask)  # sum of members' losses
    return torch.autograd.grad(loss, list(p.values()))


def lstm_only(p, ids, target, mask):
    m = ids.shape[0]
    x = torch.randn(m, R, T, H, requires_grad=True)
    total = sum(lstm(x[k], p, k).square().mean() for k in range(m))
    return torch.autograd.grad(total, [p["w_ih"], p["w_hh"]])


class Adam:
    def __init__(self, p):
        self.p = list(p.values())
        self.m = [torch.zeros_like(v) for v in self.p]
        self.v = [torch.zeros_like(v) for v in self.p]

    @torch.no_grad()
    def step(self, grads, clip=5.0, lr=0.01):
        m = grads[0].shape[0]
        norm = torch.sqrt(sum(g.reshape(m, -1).square().sum(1) for g in grads))
        scale = (clip / (norm + 1e-6)).clamp(max=1.0)
        for w, g, mo, ve in zip(self.p, grads, self.m, self.v):
            g = g * scale.view(-1, *([1] * (g.dim() - 1)))
            mo.mul_(0.9).add_(g, alpha=0.1)
            ve.mul_(0.999).addcmul_(g, g, value=0.001)
            w.sub_(lr * mo / (ve.sqrt() + 1e-8))


def bench(name, fn, m, n=40):
    p, ids, target, mask = make(m)
    opt = Adam(p)
    walls, cpus = [], []
    for i in range(n + 5):
        w, c = time.perf_counter(), time.process_time()
        grads = fn(p, ids, target, mask)
        if name != "lstm only":
            opt.step(grads)
        if i >= 5:
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
    wall, cpu = statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3
    print(f"| {name} | {m} | {wall:.2f} | {cpu:.2f} | {cpu / m:.2f} |")
    return cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", default="1,4,8")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| variant | M | ms/tick wall | ms/tick CPU | CPU ms per member |")
    print("|---|---|---|---|---|")
    for _ in range(args.repeats):  # interleaved repeats
        for m in [int(x) for x in args.members.split(",")]:
            for name, fn in (("loop", loop_tick), ("hybrid", hybrid_tick), ("lstm only", lstm_only)):
                bench(name, fn, m)


if __name__ == "__main__":
    main()
