"""Lightning data layer: the ``PFADataModule``, batching helpers and the corpus cache."""

from cfl_lightning.data.batching import (
    BATCH_KEYS,
    BatchDataset,
    BatchOrderSampler,
    TokenizedCorpus,
    collate,
    derive_seed,
    length_batches,
    state_walk,
    tensorize,
)
from cfl_lightning.data.cache import (
    CACHE_ENV,
    FORMAT_VERSION,
    CorruptCacheWarning,
    corpus_key,
    resolve_cache_dir,
)
from cfl_lightning.data.datamodule import PFADataModule
from cfl_lightning.data.settings import DataSettings
from cfl_lightning.quiet import quiet_noise

quiet_noise()  # Lightning's advertising tips and its own LeafSpec deprecation

__all__ = [
    "PFADataModule",
    "DataSettings",
    "BATCH_KEYS",
    "BatchDataset",
    "BatchOrderSampler",
    "TokenizedCorpus",
    "collate",
    "derive_seed",
    "length_batches",
    "state_walk",
    "tensorize",
    "CACHE_ENV",
    "FORMAT_VERSION",
    "CorruptCacheWarning",
    "corpus_key",
    "resolve_cache_dir",
]
