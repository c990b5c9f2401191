"""Training losses against an automaton, as pure functions of tensors (no Lightning).

The paper's loss (its eq. ``training-loss``) compares, at every position of a string including
the final EOS step, the automaton's next-symbol distribution with the model's:

.. math::

    \\mathcal{L}(\\boldsymbol{y}) = \\sum_{t=1}^{|\\boldsymbol{y}|+1}
        \\mathrm{KL}\\bigl(p_A(\\cdot \\mid \\boldsymbol{y}_{<t}) \\,\\|\\,
                           p_\\theta(\\cdot \\mid \\boldsymbol{y}_{<t})\\bigr)
    = \\sum_t \\sum_{a \\in \\Sigma \\cup \\{\\mathrm{EOS}\\}}
        p_A(a) \\,(\\log p_A(a) - \\log p_\\theta(a)).

Everything is computed in log space from the model's log-probabilities. Terms with ``p_A(a) = 0``
contribute exactly 0 (``0 log 0 = 0``, and the model's log-probability is masked out there before
the product, so a ``-inf`` there gives neither a NaN value nor a NaN gradient). Padding positions
(``mask == False``) contribute 0.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch
from torch import Tensor

from cfl_lightning.errors import CflError

__all__ = [
    "LOSSES",
    "training_loss",
    "loss_per_position",
    "kl_to_automaton_loss",
    "as_log_probs",
    "check_scores",
    "ProbabilitiesAsLogitsWarning",
    "kl_per_position",
    "cross_entropy_per_position",
    "per_string",
]


#: the losses a ``LanguageModel`` can optimize (its ``loss`` argument)
LOSSES = ("kl", "ce")


def _check(log_probs: Tensor, mask: Tensor) -> None:
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must have shape [B, T, S+1], got {list(log_probs.shape)}")
    if tuple(mask.shape) != tuple(log_probs.shape[:2]):
        raise ValueError(
            f"mask must have shape {list(log_probs.shape[:2])}, got {list(mask.shape)}"
        )


PROTOCOL = (
    "a [B, T, |S|+1] tensor of next-symbol logits or log-probabilities, EOS last, one row per "
    "position of batch['input_ids'] [B, T]"
)


class ProbabilitiesAsLogitsWarning(UserWarning):
    """A model's scores look like probabilities (non-negative, rows summing to 1), not logits."""


#: whether :class:`ProbabilitiesAsLogitsWarning` was given in this process (it is given once)
_warned_probabilities = False
#: rows within this distance of summing to 1 count as probabilities (float16 softmax included)
PROBABILITY_TOLERANCE = 1e-3


def check_scores(scores: Tensor, mask: Tensor, *, source: str = "scores") -> None:
    """Refuse scores that ``log_softmax`` would silently turn into a wrong loss or KL.

    At real positions (``mask``): NaN, ``+inf`` and rows that are entirely ``-inf`` are errors
    (``log_softmax`` would give NaN rows); an integer dtype is an error. Scores that look like
    probabilities (every entry non-negative and every row summing to 1 within
    :data:`PROBABILITY_TOLERANCE`: real logits do so only with negligible probability) give a
    :class:`ProbabilitiesAsLogitsWarning`, once per process: ``log_softmax`` of probabilities is
    not their logarithm. All checks cost one device synchronization.

    Args:
        scores: ``[B, T, |S|+1]`` logits or log-probabilities.
        mask: ``[B, T]`` bool, True on real positions.
        source: how to name the scores in messages.

    Raises:
        CflError: an integer dtype, NaN, ``+inf`` or an all-``-inf`` row at a real position.
    """
    global _warned_probabilities
    if not scores.is_floating_point():
        raise CflError(
            f"{source} has dtype {str(scores.dtype).replace('torch.', '')}: expected floating-point "
            "logits or log-probabilities (e.g. float32)"
        )
    mask = mask.bool()
    real = mask[..., None]
    if not bool(mask.any()):
        return
    flags = [
        (scores.isnan() & real).any(),
        ((scores == float("inf")) & real).any(),
        ((scores == float("-inf")).all(-1) & mask).any(),
    ]
    if not _warned_probabilities:
        rows_sum_to_one = ((scores.sum(-1) - 1).abs() <= PROBABILITY_TOLERANCE) | ~mask
        flags.append(((scores >= 0) | ~real).all() & rows_sum_to_one.all())
    has_nan, has_posinf, all_neginf, *probabilities = torch.stack(flags).tolist()
    where = "at a real position (a position of the batch's mask)"
    if has_nan:
        raise CflError(f"{source} contains NaN {where}")
    if has_posinf:
        raise CflError(
            f"{source} contains +inf {where}: logits must be finite or -inf (probability 0)"
        )
    if all_neginf:
        raise CflError(f"{source} is -inf for every symbol {where}: no distribution to normalize")
    if probabilities and probabilities[0]:
        _warned_probabilities = True
        warnings.warn(
            f"{source} looks like probabilities (non-negative, every row sums to 1), but it is "
            "read as logits and normalized with log_softmax, which gives a wrong loss and KL: "
            "return logits or log-probabilities (e.g. torch.log_softmax(logits, -1) or "
            "probs.log()) instead of softmax probabilities",
            ProbabilitiesAsLogitsWarning,
            stacklevel=3,
        )


def as_log_probs(scores: Tensor, batch: Mapping[str, Tensor], *, source: str = "scores") -> Tensor:
    """Check a model's scores against a batch and normalize them with ``log_softmax``.

    Args:
        scores: ``[B, T, |S|+1]`` logits or log-probabilities (EOS last).
        batch: a batch of :class:`~cfl_lightning.PFADataModule` (``input_ids`` ``[B, T]``,
            ``target_probs`` ``[B, T, |S|+1]``, ``mask`` ``[B, T]``).
        source: how to name the scores in an error message.

    Returns:
        ``[B, T, |S|+1]`` log-probabilities (``scores.log_softmax(-1)``).

    Raises:
        CflError (a ``ValueError``): wrong shape (the message states the expected and actual
            shapes), or the scores fail :func:`check_scores` (integer dtype, NaN, ``+inf``).

    Warns:
        ProbabilitiesAsLogitsWarning: the scores look like probabilities (once per process).
    """
    expected = tuple(batch["target_probs"].shape)
    if not isinstance(scores, Tensor) or tuple(scores.shape) != expected:
        got = list(scores.shape) if isinstance(scores, Tensor) else type(scores).__name__
        raise CflError(
            f"{source} has shape {got}, expected {list(expected)}: the prediction protocol is "
            f"{PROTOCOL}"
        )
    check_scores(scores, batch["mask"], source=source)
    return torch.log_softmax(scores, dim=-1)


def kl_to_automaton_loss(scores: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
    """The paper's training loss: per-position KL to the automaton, summed, averaged over strings.

    .. math::
        \\frac{1}{B} \\sum_{b=1}^{B} \\sum_{t=1}^{|y_b|+1}
            \\mathrm{KL}\\bigl(p_A(\\cdot \\mid y_{b,<t}) \\,\\|\\, p_\\theta(\\cdot \\mid y_{b,<t})\\bigr)

    Args:
        scores: ``[B, T, |S|+1]`` logits or log-probabilities (EOS last); checked
            (:func:`check_scores`) and normalized here with ``log_softmax``.
        batch: a :class:`~cfl_lightning.PFADataModule` batch (``target_probs`` ``[B, T, |S|+1]``,
            ``mask`` ``[B, T]``).

    Returns:
        scalar loss in nats per string (differentiable in ``scores``).

    Example:
        >>> batch = {"input_ids": torch.zeros(1, 2, dtype=torch.long),
        ...          "target_probs": torch.tensor([[[0.5, 0.5], [1.0, 0.0]]]),
        ...          "mask": torch.tensor([[True, True]])}
        >>> float(kl_to_automaton_loss(torch.zeros(1, 2, 2), batch))  # 0 + log 2
        0.6931471824645996
    """
    log_probs = as_log_probs(scores, batch, source="the model's scores")
    mask = batch["mask"].bool()
    sums, _ = per_string(kl_per_position(batch["target_probs"], log_probs, mask), mask)
    return sums.mean()


def loss_per_position(
    loss: str, log_probs: Tensor, target_probs: Tensor, target_ids: Tensor | None, mask: Tensor
) -> Tensor:
    """The optimized loss at every position: the one rule of what ``"kl"`` and ``"ce"`` mean.

    Args:
        loss: ``"kl"`` (:func:`kl_per_position`) or ``"ce"`` (:func:`cross_entropy_per_position`).
        log_probs: ``[B, T, S+1]`` model log-probabilities.
        target_probs: ``[B, T, S+1]`` the automaton's next-symbol distributions.
        target_ids: ``[B, T]`` the sampled next symbols (only ``"ce"`` reads them).
        mask: ``[B, T]`` bool, True on real positions.

    Returns:
        ``[B, T]`` nats, 0 at padding.
    """
    if loss == "kl":
        return kl_per_position(target_probs, log_probs, mask)
    if loss == "ce":
        assert target_ids is not None, "the cross-entropy needs target_ids"
        return cross_entropy_per_position(log_probs, target_ids, mask)
    raise ValueError(f"loss must be 'kl' or 'ce', got {loss!r}")


def training_loss(loss: str, scores: Tensor, batch: Mapping[str, Tensor]) -> Tensor:
    """The loss a ``LanguageModel`` optimizes on a batch (its training step and the ensembles').

    The per-string sum of :func:`loss_per_position`, averaged over the batch's strings.
    ``"kl"`` is :func:`kl_to_automaton_loss` (the scores are checked: :func:`check_scores`);
    ``"ce"`` normalizes the scores with ``log_softmax`` unchecked.

    Args:
        loss: ``"kl"`` or ``"ce"``.
        scores: ``[B, T, |S|+1]`` logits or log-probabilities (EOS last).
        batch: a :class:`~cfl_lightning.PFADataModule` batch (``target_probs``, ``mask`` and,
            for ``"ce"``, ``target_ids``).

    Returns:
        scalar loss in nats per string (differentiable in ``scores``).
    """
    if loss == "kl":
        return kl_to_automaton_loss(scores, batch)
    mask = batch["mask"].bool()
    log_probs = torch.log_softmax(scores, dim=-1)
    target_ids = batch.get("target_ids")
    values = loss_per_position(loss, log_probs, batch["target_probs"], target_ids, mask)
    return values.sum(1).mean()


def kl_per_position(target_probs: Tensor, log_probs: Tensor, mask: Tensor) -> Tensor:
    """``KL(p_A(. | prefix) || p_theta(. | prefix))`` at every position.

    Args:
        target_probs: ``[B, T, S+1]`` automaton next-symbol distributions ``p_A`` (EOS last;
            zeros at padding).
        log_probs: ``[B, T, S+1]`` model log-probabilities ``log p_theta`` (may hold ``-inf``).
        mask: ``[B, T]`` bool, True on real positions.

    Returns:
        ``[B, T]`` KL in nats (dtype of ``log_probs``), 0 at padding. It is ``+inf`` only where the
        model gives probability 0 to a symbol the automaton can emit; never NaN.

    Example:
        >>> p = torch.tensor([[[0.5, 0.5, 0.0]]])
        >>> kl_per_position(p, p.log(), torch.ones(1, 1, dtype=torch.bool))
        tensor([[0.]])
    """
    _check(log_probs, mask)
    if tuple(target_probs.shape) != tuple(log_probs.shape):
        raise ValueError(
            f"target_probs {list(target_probs.shape)} and log_probs {list(log_probs.shape)} "
            "must have the same shape"
        )
    p = target_probs.to(log_probs.dtype)
    support = p > 0
    # p log p with 0 log 0 = 0; the model's log-prob is zeroed off the support *before* the
    # product, so -inf there never meets a 0 (no NaN in the value or in the gradient).
    entropy_term = torch.xlogy(p, p)
    cross_term = p * torch.where(support, log_probs, torch.zeros_like(log_probs))
    kl = (entropy_term - cross_term).sum(dim=-1)
    return torch.where(mask, kl, torch.zeros_like(kl))


def cross_entropy_per_position(log_probs: Tensor, target_ids: Tensor, mask: Tensor) -> Tensor:
    """Next-symbol cross-entropy ``-log p_theta(y_t | y_<t)`` at every position.

    Args:
        log_probs: ``[B, T, S+1]`` model log-probabilities.
        target_ids: ``[B, T]`` long, the next symbol (EOS = ``S`` at the last real position; any
            value, e.g. PAD = ``S+2``, at padding).
        mask: ``[B, T]`` bool, True on real positions.

    Returns:
        ``[B, T]`` nats, 0 at padding.
    """
    _check(log_probs, mask)
    classes = log_probs.shape[-1]
    index = torch.where(mask, target_ids, torch.zeros_like(target_ids)).clamp(0, classes - 1)
    nll = -log_probs.gather(-1, index.unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, nll, torch.zeros_like(nll))


def per_string(values: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Reduce per-position values to per-string sums and a per-token mean.

    Args:
        values: ``[B, T]`` per-position losses (0 at padding).
        mask: ``[B, T]`` bool.

    Returns:
        ``(sums, per_token)``: ``[B]`` per-string sums over real positions (a string of length
        ``n`` has ``n + 1`` of them, the last being EOS), and the scalar total divided by the
        number of real positions in the batch.
    """
    sums = values.sum(dim=1)
    tokens = mask.sum().clamp_min(1)
    return sums, sums.sum() / tokens
