"""How a ``LanguageModel`` subclass is finished after its ``__init__``: no call of the subclass's.

A subclass writes ``super().__init__(...)`` and its layers; :class:`~cfl_lightning.models.
LanguageModel` wraps every subclass's ``__init__`` (:func:`finishing_init`, applied in its
``__init_subclass__``) so that, once the outermost ``__init__`` of the instance has returned, the
model is finished in one place (``LanguageModel._after_init``): the package's initialisation,
the parameter count, and the hyperparameters (the call's arguments, :func:`init_arguments`).
The wrapper keeps the wrapped signature (``functools.wraps``), so ``inspect.signature``,
LightningCLI and jsonargparse see the subclass's own arguments.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["finishing_init", "init_arguments", "cli_is_instantiating"]

#: the instance attribute counting the ``__init__`` calls in progress (nested through ``super``)
_DEPTH = "_language_model_init_depth"


def init_arguments(init: Callable[..., None], args: tuple, kwargs: Mapping[str, Any]) -> dict:
    """The arguments of the call ``init(self, *args, **kwargs)``, as Lightning's
    ``save_hyperparameters`` reads them from an ``__init__`` frame: every named parameter in
    signature order (defaults included; ``self`` and ``*args`` left out), then the entries of
    ``**kwargs`` in the order they were given."""
    signature = inspect.signature(init)
    bound = signature.bind(None, *args, **kwargs)
    bound.apply_defaults()
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for index, (name, parameter) in enumerate(signature.parameters.items()):
        if index == 0 or parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            continue
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            extra = dict(bound.arguments.get(name, {}))
        else:
            values[name] = bound.arguments[name]
    values.update(extra)
    return values


def finishing_init(
    init: Callable[..., None], finish: Callable[[Any, dict], None]
) -> Callable[..., None]:
    """``init`` wrapped so that ``finish(self, arguments)`` runs once per instance, after the
    outermost wrapped ``__init__`` returns (a subclass's ``super().__init__`` is not the
    outermost); ``arguments`` are that call's (:func:`init_arguments`)."""

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        depth = self.__dict__.get(_DEPTH, 0)
        self.__dict__[_DEPTH] = depth + 1
        try:
            init(self, *args, **kwargs)
        finally:
            self.__dict__[_DEPTH] = depth
        if depth == 0:
            del self.__dict__[_DEPTH]
            finish(self, init_arguments(init, args, kwargs))

    __init__.finishes_language_model = True  # type: ignore[attr-defined]
    return __init__


def cli_is_instantiating() -> bool:
    """Whether LightningCLI is instantiating the model now (it then hands ``save_hyperparameters``
    its parsed ``init_args``, which are kept as they are: Lightning's ``_given_hyperparameters``,
    set around the instantiation; False where this Lightning has no such record)."""
    from lightning.pytorch.core.mixins import hparams_mixin

    given = getattr(hparams_mixin, "_given_hyperparameters", None)
    return given is not None and given.get() is not None
