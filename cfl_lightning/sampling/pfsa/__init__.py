"""The PFSA's sampler backend (:mod:`~cfl_lightning.sampling.pfsa.backend`): the backward bins
of the binning semiring, forward sampling along them."""

__all__: list[str] = []
