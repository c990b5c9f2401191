"""The pushdown automaton's sampler backend (:mod:`~cfl_lightning.sampling.pushdown.backend`):
unconstrained sampling (``unconstrained``), the count law over excursions (``law``,
``series``), bounds on one string's count (``bounds``), and the conditioned walk (``tables``,
``conditioned``)."""

__all__: list[str] = []
