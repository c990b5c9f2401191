"""On-disk cache of sampled corpora.

A corpus is identified by :func:`corpus_key`, a sha256 over the canonical automaton JSON and
every argument that determines the sample (split, size, seed, intervention, event, count,
method, device type) plus :data:`FORMAT_VERSION`. It is stored as ``<cache_dir>/corpora/<key>.pt``:
a ``torch.save`` of a plain dict of tensors (``tokens``, ``offsets``, optionally ``counts``, and
``sha256``, a checksum over the key and the tensors' dtypes, shapes and bytes), read back with
``torch.load(weights_only=True)`` -- no pickled objects. Files are written atomically.

A file that cannot be read, lacks a tensor, or fails its checksum is reported with a
:class:`CorruptCacheWarning` naming the file; the caller then samples again and overwrites it.

Where the cache lives (:func:`resolve_cache_dir`): an explicit directory; else the environment
variable ``CFL_LIGHTNING_CACHE``; else ``~/.cache/cfl_lightning``. The value ``"none"`` (either
as the argument or in the environment variable, any case) disables caching.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from cfl_lightning.automata import Automaton
from cfl_lightning.checkpoint_io import atomic_torch_save
from cfl_lightning.sampling import Corpus
from cfl_lightning.version import __version__

__all__ = [
    "FORMAT_VERSION",
    "CACHE_ENV",
    "CorruptCacheWarning",
    "resolve_cache_dir",
    "automaton_json",
    "corpus_key",
    "save_corpus",
    "load_corpus",
    "cached_corpus",
]

FORMAT_VERSION = 1
CACHE_ENV = "CFL_LIGHTNING_CACHE"
_DISABLED = "none"


class CorruptCacheWarning(UserWarning):
    """A cache file was unreadable or failed its checksum; the corpus is sampled again."""


def resolve_cache_dir(cache_dir: str | os.PathLike | None) -> Path | None:
    """The cache directory to use, or ``None`` when caching is disabled (see module docstring)."""
    value = os.environ.get(CACHE_ENV) if cache_dir is None else os.fspath(cache_dir)
    if value is None or value == "":
        return Path("~/.cache/cfl_lightning").expanduser()
    if value.strip().lower() == _DISABLED:
        return None
    return Path(value).expanduser()


def automaton_json(automaton: Automaton) -> str:
    """Canonical JSON of an automaton (sorted keys, compact): the basis of ids and cache keys."""
    return json.dumps(automaton.to_dict(), sort_keys=True, separators=(",", ":"))


def corpus_key(automaton: Automaton, **arguments: object) -> str:
    """sha256 (hex) identifying a corpus: the automaton plus every sampling argument."""
    record = {
        "format": FORMAT_VERSION,
        "version": __version__,
        "automaton": automaton_json(automaton),
        "arguments": arguments,
    }
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _checksum(key: str, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    digest = hashlib.sha256(key.encode("utf-8"))
    for name in sorted(tensors):
        value = tensors[name].contiguous().cpu()
        digest.update(f"{name}|{value.dtype}|{list(value.shape)}|".encode())
        digest.update(value.numpy().tobytes())
    return torch.frombuffer(bytearray(digest.digest()), dtype=torch.uint8).clone()


def save_corpus(path: str | os.PathLike, corpus: Corpus, key: str) -> None:
    """Write ``corpus`` atomically with its checksum."""
    tensors = {"tokens": corpus.tokens.cpu().long(), "offsets": corpus.offsets.cpu().long()}
    if corpus.counts is not None:
        tensors["counts"] = corpus.counts.cpu().long()
    payload = dict(tensors, sha256=_checksum(key, tensors))
    # (serialized in memory first: torch's zip writer reports a full disk as a RuntimeError)
    atomic_torch_save(payload, path)


def load_corpus(path: str | os.PathLike, key: str) -> Corpus | None:
    """Read a cached corpus; ``None`` if absent, or (with a warning) if corrupt."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        tensors = {k: v for k, v in payload.items() if k != "sha256"}
        if set(tensors) - {"counts"} != {"tokens", "offsets"} or not all(
            isinstance(v, torch.Tensor) and v.dtype == torch.long for v in tensors.values()
        ):
            raise ValueError("unexpected contents")
        if not torch.equal(payload["sha256"], _checksum(key, tensors)):
            raise ValueError("checksum mismatch")
    except Exception as err:  # noqa: BLE001 - any unreadable file is treated as corrupt
        warnings.warn(
            f"corpus cache file {path} is corrupt ({type(err).__name__}: {err}); "
            "sampling the corpus again and rewriting it",
            CorruptCacheWarning,
            stacklevel=3,
        )
        return None
    return Corpus(tensors["tokens"], tensors["offsets"], tensors.get("counts"))


def cached_corpus(
    cache_dir: Path | None, key: str, sample: Callable[[], Corpus]
) -> tuple[Corpus, bool]:
    """The corpus under ``key``: from the cache, or from ``sample()`` (then written to the cache).

    Returns:
        ``(corpus, hit)``; ``hit`` is True when the corpus came from the cache. A failure to write
        the cache (read-only directory, full disk) is a warning, not an error.
    """
    if cache_dir is None:
        return sample(), False
    path = cache_dir / "corpora" / f"{key}.pt"
    corpus = load_corpus(path, key)
    if corpus is not None:
        return corpus, True
    corpus = sample()
    try:
        save_corpus(path, corpus, key)
    except OSError as err:
        warnings.warn(f"could not write corpus cache file {path}: {err}", stacklevel=2)
    return corpus, False
