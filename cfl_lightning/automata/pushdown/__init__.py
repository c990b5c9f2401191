"""The real-time deterministic probabilistic pushdown automaton kind: the automaton
(:mod:`~cfl_lightning.automata.pushdown.automaton`), its JSON form (``json_form``), checks
(``validate``), the excursion system's fixed point (``fixpoint``, ``structured``), position
classes (``annotate``), event tables (``events``) and generators (``generators``). Its sampler
backend is :mod:`cfl_lightning.sampling.pushdown`; its registration, the ``pushdown`` entry of
:mod:`cfl_lightning.kinds.automata`."""

from cfl_lightning.automata.pushdown.automaton import KEEP, POP, PushdownAutomaton

__all__ = ["PushdownAutomaton", "KEEP", "POP"]
