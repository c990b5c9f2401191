"""The packed stacked transformer vs ``torch.func.vmap`` over ``functional_call`` (issue 29).

One training step's gradient (the KL training loss, summed over members) of M transformer
members, each on its own batch (``max_tokens`` 128, as the shipped configs), three ways:

* ``packed``: :class:`~cfl_lightning.models.StackedTransformer` on the members' batches packed
  side by side ``[M, R, L]`` (block-causal attention; what the stacked engine runs);
* ``vmap``: ``torch.func.vmap(torch.func.grad(loss))`` of the model's own forward
  (``functional_call``) over the members, their batches padded to one ``[M, B, T]``;
* ``loop``: each member's own forward and backward in turn (the loop engine's way).

Prints median real tokens/s per method and the ratio to ``packed`` (same process).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch


def build(i: int, num_strings: int):
    import lightning

    from cfl_lightning.data import PFADataModule
    from cfl_lightning.models import TransformerLanguageModel

    lightning.seed_everything(i, verbose=False)
    dm = PFADataModule(generator="parity_resampled", weight_seed=i, intervention="exact",
                       event="state:odd", count=3 * num_strings, num_strings=num_strings,
                       val_strings=20, test_strings=0, max_tokens=128, cache_dir="none",
                       device="cpu")
    dm.setup("fit")
    model = TransformerLanguageModel(num_symbols=dm.num_symbols, dropout=0.0, lr=0.01)
    return model, dm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--strings", type=int, default=200)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from cfl_lightning.data.batching import collate
    from cfl_lightning.ensemble import PackedCorpora, ParameterLayout
    from cfl_lightning.ensemble.step import loss_sums
    from cfl_lightning.losses import training_loss

    device = torch.device(args.device)
    built = [build(i, args.strings) for i in range(max(args.members))]
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'M':>3} {'method':>7} {'tokens/s':>10} {'vs packed':>9}")
    for m in args.members:
        models, dms = zip(*built[:m])
        layout = ParameterLayout.of(models[0])
        flat = layout.stack(list(models)).to(device)
        packed = PackedCorpora([d.tokenized("train") for d in dms],
                               [d.batches("train") for d in dms],
                               [d.pfsa.next_symbol_probs() for d in dms], dms[0].pad_id,
                               device=device)
        rng = np.random.default_rng(0)
        plan = [[int(rng.integers(packed.num_batches[i])) for i in range(m)]
                for _ in range(args.steps + 2)]
        batches = [[{k: v.to(device) for k, v in collate(
            d.tokenized("train"), d.batches("train")[b], d.pfsa.next_symbol_probs().float(),
            d.pad_id).items()} for d, b in zip(dms, local)] for local in plan]
        tokens = [sum(int(b["mask"].sum()) for b in bs) for bs in batches]
        template = models[0].to(device).train()
        network = models[0].stacked_network()

        def packed_step(k: int) -> None:
            ids = np.array([packed.first_batch[i] + b for i, b in enumerate(plan[k])])
            leaf = flat.detach().requires_grad_(True)
            batch = packed.step(ids)
            sums = loss_sums(network, layout, leaf, batch, "kl", True)
            torch.autograd.grad((sums / batch.strings).sum(), leaf)

        def padded(k: int) -> dict[str, torch.Tensor]:
            bs = batches[k]
            rows = max(b["input_ids"].shape[0] for b in bs)
            width = max(b["input_ids"].shape[1] for b in bs)
            out = {}
            for key in ("input_ids", "target_probs", "mask", "target_ids"):
                parts = []
                for b in bs:
                    x = b[key]
                    pad = [0, 0] * (x.dim() - 2) + [0, width - x.shape[1], 0, rows - x.shape[0]]
                    parts.append(torch.nn.functional.pad(x, pad))
                out[key] = torch.stack(parts)
            out["strings"] = torch.tensor([b["input_ids"].shape[0] for b in bs], device=device)
            return out

        def member_loss(params, input_ids, target_probs, mask, target_ids, strings):
            scores = torch.func.functional_call(template, params, (input_ids,))
            lp = torch.log_softmax(scores, -1)
            from cfl_lightning.losses import loss_per_position

            return loss_per_position("kl", lp, target_probs, target_ids, mask).sum() / strings

        vmapped = torch.func.vmap(torch.func.grad(member_loss))
        stacked_views = layout.views(flat)

        def vmap_step(k: int) -> None:
            b = padded(k)
            vmapped(stacked_views, b["input_ids"], b["target_probs"], b["mask"].bool(),
                    b["target_ids"], b["strings"])

        def loop_step(k: int) -> None:
            for i, b in enumerate(batches[k]):
                leaf = flat[i].detach().requires_grad_(True)
                scores = torch.func.functional_call(template, layout.row_views(leaf),
                                                    (b["input_ids"],))
                torch.autograd.grad(training_loss("kl", scores, b), leaf)

        rates = {}
        for name, step in (("packed", packed_step), ("vmap", vmap_step), ("loop", loop_step)):
            times = []
            try:
                for k in range(len(plan)):
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    start = time.perf_counter()
                    step(k)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    if k >= 2:
                        times.append(tokens[k] / (time.perf_counter() - start))
                rates[name] = statistics.median(times)
            except Exception as err:  # noqa: BLE001 - a method that cannot run is reported
                print(f"{m:>3} {name:>7} failed: {str(err).splitlines()[0][:120]}")
                continue
            print(f"{m:>3} {name:>7} {rates[name]:>10.0f} {rates[name] / rates['packed']:>9.2f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
