"""Prototype: the stacked transformer's training computation, eager vs ``torch.compile`` (CPU).

Usage::

    python benchmarks/probe_compile_transformer.py --members 4

M transformer members of the headline config (random 50-state, 10-symbol automata, topologies
15 and 38, exact counts 250 and 1000 of ``a``, 500 strings; 128k parameters), one thread. One
fixed packed batch (every member's middle training batch in length order, packed as the stacked
engine packs them: ``PackedCorpora.step``) through ``loss_sums`` of the ensemble's stacked
network (forward, KL, backward to the ``[M, P]`` parameter; no optimizer), eager and compiled
(inductor, one shape: a ``static``-mode bucket is one fixed shape), against the shipped
models one after the other (``nn.TransformerEncoder``, each on its own collated batch).
Prints median ms per tick (wall, CPU of this process) and the compilation's time (its
compile workers are other processes: CPU here is a lower bound). The code under test is
the package's; nothing of it is changed.
"""

import argparse
import statistics
import time

import numpy as np
import torch

torch.set_num_threads(1)


def timed(fn, n=30):
    walls, cpus = [], []
    for i in range(n + 3):
        w, c = time.perf_counter(), time.process_time()
        fn()
        if i >= 3:
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
    return statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


def grid_transformers(m: int):
    """``(datamodules, models, layout, packed)``: m transformer members of the CPU grid
    (topologies 15 and 38 x counts 250 and 1000 of ``a``, cycled), dropout 0.1, their training
    corpora packed as the stacked engine packs them (``PackedCorpora``)."""
    import lightning

    from cfl_lightning.data import PFADataModule
    from cfl_lightning.ensemble import PackedCorpora, ParameterLayout
    from cfl_lightning.models import TransformerLanguageModel

    dms, models = [], []
    for i in range(m):
        lightning.seed_everything(0, verbose=False)
        dm = PFADataModule(generator="random", num_states=50, num_symbols=10,
                           topology_seed=(15, 38)[i % 2], weight_seed=0, intervention="exact",
                           event="symbol:a", count=(250, 1000)[(i // 2) % 2], num_strings=500,
                           seed=0, device="cpu")
        dms.append(dm)
        models.append(TransformerLanguageModel(num_symbols=dm.num_symbols, dropout=0.1, lr=0.01))
    layout = ParameterLayout.of(models[0])
    packed = PackedCorpora([d.tokenized("train") for d in dms], [d.batches("train") for d in dms],
                           [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id)
    return dms, models, layout, packed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=4)
    m = parser.parse_args().members
    from cfl_lightning.data.batching import collate
    from cfl_lightning.ensemble import stacked_network
    from cfl_lightning.ensemble.step import loss_sums
    from cfl_lightning.losses import kl_to_automaton_loss

    dms, models, layout, packed = grid_transformers(m)
    ids = np.array([packed.first_batch[i] + packed.num_batches[i] // 2 for i in range(m)])
    batch = packed.step(ids)
    network = stacked_network(models[0])
    network.compact = False  # the dense form (what CUDA captures; compile needs no host read)
    param = torch.nn.Parameter(layout.stack(models))
    tokens = int(batch.mask.sum())
    print(f"members {m}, packed batch {tuple(batch.input_ids.shape)}, {tokens} real tokens, 1 thread")

    def body():
        sums = loss_sums(network, layout, param, batch, "kl", True)
        (grad,) = torch.autograd.grad(sums.sum(), param)
        return grad

    w, c = timed(body)
    print(f"stacked, eager:     {w:.2f} ms wall, {c:.2f} ms CPU a tick")
    compiled = torch.compile(body)
    t0, c0 = time.perf_counter(), time.process_time()
    compiled()
    print(f"compilation:        {time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU")
    w, c = timed(compiled)
    print(f"stacked, compiled:  {w:.2f} ms wall, {c:.2f} ms CPU a tick")
    batches = []
    for i, d in enumerate(dms):
        index = d.batches("train")[int(ids[i]) - packed.first_batch[i]]
        batches.append(collate(d.tokenized("train"), index, d.pfsa.next_symbol_probs().float(),
                               d.pad_id))
    for mod in models:
        mod.train()

    def shipped():
        for mod, b in zip(models, batches):
            loss = kl_to_automaton_loss(mod(b["input_ids"]), b)
            torch.autograd.grad(loss, list(mod.parameters()))

    w, c = timed(shipped)
    print(f"shipped x {m}:        {w:.2f} ms wall, {c:.2f} ms CPU a tick")


if __name__ == "__main__":
    main()
