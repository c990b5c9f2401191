"""Prototype: the stacked transformer's attention per slot, and its compact form, on the CPU.

Usage::

    python benchmarks/probe_slot_attention.py --members 4 --batches 8

The stacked transformer attends over each packed row of ``L`` cells with a block-causal mask
(a cell sees its own slot's cells at or before it): ``[M*R, heads, L, L]`` scores of which only
the slots' diagonal blocks count. A member whose batch width is ``w`` holds ``k = L // w`` slots
a row, so the dense products do about ``k`` times the needed work. The variant here computes,
member by member (host loop; the widths are read on the host, which is free on a CPU and not
capturable on a GPU), causal attention over ``[R * k, heads, w, head]`` views of the same
``qkv``, the rest of the network unchanged. On the grid's 4 transformer members of
``benchmarks/bench_cpu_grid.py`` (topologies 15 and 38, counts 250 and 1000; 128k parameters),
``--batches`` ticks spread over an epoch (member ``m`` contributes its batch at the same
fraction of its list), one thread: forward + KL + backward to the ``[M, P]`` parameter, eager,
dropout 0.1. Also the shipped compact form (``StackedTransformer(compact=True)``, forced on
every tick: position-wise work on the real cells only). Prints the median ms per tick (CPU of
this process) of the three, interleaved, and checks with dropout off that the real positions'
log-probabilities agree. These ticks hold every member's batch at the same point of its list
(as lockstep pacing makes them); the CPU's width pacing makes ticks of one or two members with
little padding, where neither variant gains (docs/benchmarks_cpu.md).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)


def slot_attention_network(base):
    """A :class:`StackedTransformer` whose attention runs per member over its slots."""
    from cfl_lightning.models.base import sinusoidal_positions

    class SlotAttention(type(base)):
        def __call__(self, w, input_ids, position, slot, training):
            members, rows, length = input_ids.shape
            p = self.dropout if training else 0.0
            embedding = w["net.embedding.weight"]
            d = embedding.shape[-1]
            index = torch.arange(members)[:, None, None]
            table = sinusoidal_positions(length, d).to(embedding.dtype)
            x = embedding[index, input_ids] * math.sqrt(d) + table[position]
            x = F.dropout(x, p, training).reshape(members, rows * length, d)
            widths = (position[:, 0, :].amax(-1) + 1).tolist()  # [M] slot widths (host)
            heads, head = self.num_heads, d // self.num_heads
            for i in range(self.num_layers):
                pre = f"net.layers.layers.{i}."
                y = self._norm(x, w[pre + "norm1.weight"], w[pre + "norm1.bias"])
                qkv = self._linear(y, w[pre + "self_attn.in_proj_weight"],
                                   w[pre + "self_attn.in_proj_bias"])
                qkv = qkv.view(members, rows, length, 3 * d)
                outs = []
                for m in range(members):
                    width = int(widths[m])
                    k = length // width
                    n = k * width
                    part = qkv[m, :, :n].reshape(rows * k, width, 3, heads, head)
                    part = part.permute(2, 0, 3, 1, 4)
                    a = F.scaled_dot_product_attention(part[0], part[1], part[2],
                                                       is_causal=True, dropout_p=p)
                    a = a.transpose(1, 2).reshape(rows, n, d)
                    if n < length:
                        a = F.pad(a, (0, 0, 0, length - n))
                    outs.append(a)
                attn = torch.stack(outs).reshape(members, rows * length, d)
                attn = self._linear(attn, w[pre + "self_attn.out_proj.weight"],
                                    w[pre + "self_attn.out_proj.bias"])
                x = x + F.dropout(attn, p, training)
                y = self._norm(x, w[pre + "norm2.weight"], w[pre + "norm2.bias"])
                y = F.dropout(torch.relu(self._linear(y, w[pre + "linear1.weight"],
                                                      w[pre + "linear1.bias"])), p, training)
                y = self._linear(y, w[pre + "linear2.weight"], w[pre + "linear2.bias"])
                x = x + F.dropout(y, p, training)
            x = self._norm(x, w["net.norm.weight"], w["net.norm.bias"])
            logits = self._linear(x, w["net.output.weight"], w["net.output.bias"])
            return torch.log_softmax(logits, dim=-1).view(members, rows, length, -1)

    net = SlotAttention.__new__(SlotAttention)
    net.__dict__.update(base.__dict__)
    return net


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    m = args.members
    from probe_compile_transformer import grid_transformers

    from cfl_lightning.ensemble import stacked_network
    from cfl_lightning.ensemble.step import loss_sums

    dms, models, layout, packed = grid_transformers(m)
    dense = stacked_network(models[0])
    dense.compact = False
    slots = slot_attention_network(dense)
    compact = stacked_network(models[0])  # the shipped compact form, forced on every tick
    compact.compact = True
    from cfl_lightning.models import stacked_transformer

    stacked_transformer.COMPACT_FILL = 1.0
    param = torch.nn.Parameter(layout.stack(models))
    batches = []
    for j in range(args.batches):
        frac = (j + 0.5) / args.batches
        ids = np.array([packed.first_batch[i] + int(frac * packed.num_batches[i])
                        for i in range(m)])
        batches.append(packed.step(ids))
    cells = sum(b.mask.numel() for b in batches)
    real = sum(int(b.mask.sum()) for b in batches)
    print(f"members {m}, {args.batches} ticks, shapes "
          f"{[tuple(b.input_ids.shape[1:]) for b in batches]}, real/cells {real}/{cells}")

    worst = worst_c = 0.0
    with torch.no_grad():
        for b in batches:
            a = dense(layout.views(param), b.input_ids, b.position, b.slot, False)
            s = slots(layout.views(param), b.input_ids, b.position, b.slot, False)
            c = compact(layout.views(param), b.input_ids, b.position, b.slot, False)
            worst = max(worst, float((a - s).abs()[b.mask].max()))
            worst_c = max(worst_c, float((a - c).abs()[b.mask].max()))
    print(f"dropout off: largest |difference| of log-probabilities on real positions: per-slot "
          f"{worst:.2e}, compact {worst_c:.2e}")

    def tick(network):
        def run():
            for b in batches:
                sums = loss_sums(network, layout, param, b, "kl", True)
                torch.autograd.grad(sums.sum(), param)
        return run

    times: dict[str, list[float]] = {"dense": [], "slots": [], "compact": []}
    for _ in range(args.repeats):
        for name, net in (("dense", dense), ("slots", slots), ("compact", compact)):
            c = time.process_time()
            tick(net)()
            times[name].append((time.process_time() - c) * 1e3 / len(batches))
    d, s = statistics.median(times["dense"]), statistics.median(times["slots"])
    c = statistics.median(times["compact"])
    print(f"CPU ms per tick (median of {args.repeats}, interleaved): dense {d:.2f}, "
          f"per-slot {s:.2f} ({s / d:.2f}x), compact {c:.2f} ({c / d:.2f}x)")


if __name__ == "__main__":
    main()
