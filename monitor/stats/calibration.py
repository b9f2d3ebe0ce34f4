"""Calibration of scores read as relevance probabilities: ECE, MCE, Brier and its decomposition.

Conventions (``docs/statistics.md`` and the review notes, section F):

* ``equal_width``: B bins with edges k/B. Right-closed bins ((m-1)/B, m/B] as Guo et al. (2017),
  assigned with ``np.searchsorted(np.arange(B + 1) / B, p, side='left') - 1`` (not floor(p B),
  which puts a score on an edge in the bin above); ``closed='left'`` gives [(m-1)/B, m/B). The
  outer edges are closed: 0 falls in the first bin, 1 in the last.
* ``equal_mass`` (the monitor's default): the scores are sorted and the one at sorted position i
  (0-based) goes to bin floor(i B / N), so bins hold floor(N/B) or ceil(N/B) scores; a run of
  equal scores goes whole to the bin of its first member, so ties never straddle bins (bins can
  then hold more, and later bins fewer or none). ``closed`` does not apply.
* ECE = sum_b (n_b/N) |acc_b - conf_b|, MCE = max over non-empty bins of |acc_b - conf_b|
  (acc_b: fraction of positives, conf_b: mean score in bin b); Brier = mean (p - y)^2.
* Murphy (1973) decomposition on the bins: REL = sum_b (n_b/N)(conf_b - acc_b)^2, RES = sum_b
  (n_b/N)(acc_b - ybar)^2, UNC = ybar (1 - ybar). Brier = REL - RES + UNC + W exactly, with the
  within-bin term W = (1/N) sum_i (p_i - conf_b)^2 - (2/N) sum_i (p_i - conf_b)(y_i - acc_b)
  (Stephenson, Coelho & Jolliffe 2008); W = 0 when scores are constant within bins.
* AUC: pooled ROC AUC with ties counting 1/2, U / (n_pos n_neg), U the Mann-Whitney U of the
  positives (per positive, the negatives below it plus half those equal to it), counted on each
  class's sorted scores. No argsort: the bins and the AUC need sorted values only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.errors import StatsInputError
from monitor.stats import _validation as v

__all__ = ["CalibrationBin", "CalibrationResult", "calibration"]

_BINNINGS = ("equal_mass", "equal_width")
_CLOSED = ("right", "left")


@dataclass(frozen=True, slots=True)
class CalibrationBin:
    """One non-empty bin: ``n`` scores, their mean (``mean_confidence``), the fraction of positive
    labels, ``gap`` = |fraction_positive - mean_confidence|, and its range.

    ``lower``/``upper``: the bin's edges for ``equal_width`` ((index)/B and (index + 1)/B), the
    smallest and largest score in it for ``equal_mass``. ``index`` is the bin number 0 .. B-1
    (``equal_width``: the interval; ``equal_mass``: the rank of the bin, empty ones skipped).
    """

    index: int
    n: int
    mean_confidence: float
    fraction_positive: float
    gap: float
    lower: float
    upper: float


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """Calibration summary of ``n`` scored items, ``positives`` of them labelled 1.

    ``probabilities`` is whether every score lies in [0, 1]; if not, the scores are not
    probabilities: ``ece``, ``mce``, ``brier`` and the decomposition are None, ``bins`` is empty,
    and only ``auc`` is computed. ``auc`` is None when one class is empty. ``n_bins`` is the
    requested number of bins (``len(bins)`` counts the non-empty ones).
    """

    n: int
    positives: int
    n_bins: int
    binning: str
    ece: float | None
    mce: float | None
    brier: float | None
    reliability: float | None
    resolution: float | None
    uncertainty: float | None
    within_bin: float | None
    auc: float | None
    bins: tuple[CalibrationBin, ...]
    probabilities: bool


def calibration(
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    n_bins: int = 10,
    binning: Literal["equal_mass", "equal_width"] = "equal_mass",
    closed: Literal["right", "left"] = "right",
) -> CalibrationResult:
    """ECE, MCE, Brier score, Murphy decomposition and ROC AUC of scores against 0/1 labels.

    Bins and formulas are in the module docstring. ``within_bin`` = brier - (reliability -
    resolution + uncertainty), the term the binned decomposition leaves (0 up to round-off when
    every bin holds one score value). Scores outside [0, 1] are not probabilities: only the AUC
    is computed (``probabilities=False``).
    """
    n_bins = v.integer(n_bins, "n_bins", minimum=1)
    binning_name = v.choice(binning, "binning", _BINNINGS)
    closed_name = v.choice(closed, "closed", _CLOSED)
    p = v.sample(scores, "scores")
    label = _labels(labels)
    if label.size != p.size:
        raise StatsInputError(
            f"`labels` must have the same length as `scores` (one label per score); "
            f"got {label.size} and {p.size}."
        )

    n = p.size
    # sorted values only (no argsort): each class's for the AUC and the positives per bin
    # (selected by index: a mask is slower), and all scores for the equal-mass bins as the two
    # merged, not sorted a third time
    pos, neg = np.sort(p.take(np.flatnonzero(label))), np.sort(p.take(np.flatnonzero(~label)))
    below = np.searchsorted(neg, pos, side="left")
    ps = _merged(pos, neg, below)
    positives = int(pos.size)
    auc = _auc(pos, neg, below)
    probabilities = bool(ps[0] >= 0.0 and ps[-1] <= 1.0)
    if not probabilities:
        return CalibrationResult(
            n=n,
            positives=positives,
            n_bins=n_bins,
            binning=binning_name,
            ece=None,
            mce=None,
            brier=None,
            reliability=None,
            resolution=None,
            uncertainty=None,
            within_bin=None,
            auc=auc,
            bins=(),
            probabilities=False,
        )

    if binning_name == "equal_width":
        edges = np.arange(n_bins + 1) / n_bins
        side: Literal["left", "right"] = "left" if closed_name == "right" else "right"
        which = np.clip(np.searchsorted(edges, ps, side=side) - 1, 0, n_bins - 1)
        count = np.bincount(which, minlength=n_bins)
        filled = np.flatnonzero(count)
        sums = np.bincount(which, weights=ps, minlength=n_bins)[filled]
        at = np.cumsum(count) - count  # each bin's first sorted score
        lower, upper = filled / n_bins, (filled + 1) / n_bins
        index = filled
    else:
        count = np.diff(_equal_mass(ps, n_bins))
        filled = np.flatnonzero(count)
        at = np.cumsum(count) - count
        sums = np.add.reduceat(ps, at[filled])
        ends = at + count
        lower, upper = ps[at[filled]], ps[ends[filled] - 1]
        index = np.arange(filled.size)
    n_b = count[filled].astype(np.float64)
    conf = sums / n_b
    # a bin holds every score in [its first, its last] (ties never straddle bins; with equal
    # widths a bin is a range of values): its positives are those of the class's sorted scores
    first, last = ps[at[filled]], ps[at[filled] + count[filled] - 1]
    in_bin = np.searchsorted(pos, last, side="right") - np.searchsorted(pos, first, side="left")
    acc = in_bin / n_b
    gap = np.abs(acc - conf)
    weight = n_b / n
    ybar = positives / n
    # (p - y)^2 is p^2 for a negative, (1 - p)^2 for a positive (no np.dot: BLAS threads that
    # spin after the call cost the reader's thread its core)
    brier = (float(np.sum(np.square(neg))) + float(np.sum(np.square(1.0 - pos)))) / n
    reliability = float(np.sum(weight * (conf - acc) ** 2))
    resolution = float(np.sum(weight * (acc - ybar) ** 2))
    uncertainty = ybar * (1.0 - ybar)
    bins = tuple(
        CalibrationBin(
            index=int(index[j]),
            n=int(count[filled[j]]),
            mean_confidence=float(conf[j]),
            fraction_positive=float(acc[j]),
            gap=float(gap[j]),
            lower=float(lower[j]),
            upper=float(upper[j]),
        )
        for j in range(filled.size)
    )
    return CalibrationResult(
        n=n,
        positives=positives,
        n_bins=n_bins,
        binning=binning_name,
        ece=float(np.sum(weight * gap)),
        mce=float(gap.max()),
        brier=brier,
        reliability=reliability,
        resolution=resolution,
        uncertainty=uncertainty,
        within_bin=brier - (reliability - resolution + uncertainty),
        auc=auc,
        bins=bins,
        probabilities=True,
    )


def _labels(labels: ArrayLike) -> NDArray[np.bool_]:
    """``labels`` as booleans (booleans, or numbers equal to 0 or 1)."""
    v.refuse_masked(labels, "labels")
    if _nonempty_booleans(labels):  # nothing to check
        return np.asarray(labels)
    y = v.sample(labels, "labels")
    bad = (y != 0.0) & (y != 1.0)
    if bad.any():
        first = int(np.argmax(bad))
        raise StatsInputError(
            f"`labels` must be 0 or 1 (or booleans); got {int(np.count_nonzero(bad))} other "
            f"value(s), the first {y[first]:g} at position {first}."
        )
    return np.asarray(y == 1.0, dtype=np.bool_)


def _nonempty_booleans(labels: ArrayLike) -> bool:
    return (
        isinstance(labels, np.ndarray)
        and labels.dtype == np.bool_
        and labels.ndim == 1
        and labels.size > 0
    )


def _equal_mass(ps: NDArray[np.float64], n_bins: int) -> NDArray[np.int64]:
    """Edges of the equal-mass bins in sorted position: bin b holds the sorted scores
    ``edges[b]`` .. ``edges[b + 1] - 1``. Sorted position i goes to bin floor(i B / N) and a run of
    ties to the bin of its first member, so bin b starts at the first run start at or after
    ceil(b N / B)."""
    n = ps.size
    nominal = -((-np.arange(n_bins + 1) * n) // n_bins)  # ceil(b N / B)
    edges = np.minimum(nominal, n)
    inner = edges[1:-1]  # a view: moved in place
    tied = np.flatnonzero((inner < n) & (ps[np.minimum(inner, n - 1)] == ps[inner - 1]))
    inner[tied] = np.searchsorted(ps, ps[inner[tied]], side="right")  # inside a run: its end
    return edges


def _merged(
    pos: NDArray[np.float64], neg: NDArray[np.float64], below: NDArray[np.intp]
) -> NDArray[np.float64]:
    """The sorted union of two sorted arrays, ``below`` = #{neg < pos_i} for each i: positive i
    goes to position i + below_i (strictly increasing), the negatives fill the rest in order.
    One pass, not a sort (a sort of all the scores cost as much as both classes' together)."""
    out = np.empty(pos.size + neg.size, dtype=np.float64)
    at = below + np.arange(pos.size)
    out[at] = pos
    rest = np.ones(out.size, dtype=bool)
    rest[at] = False
    out[rest] = neg
    return out


def _auc(
    pos: NDArray[np.float64], neg: NDArray[np.float64], below: NDArray[np.intp]
) -> float | None:
    """U / (n_pos n_neg) from the sorted scores of each class, None if a class is empty: U =
    sum over positives of the negatives below it plus half those equal to it (the Mann-Whitney
    U of the positives, ties counting 1/2), counted exactly in integers; ``below`` =
    #{neg < pos_i} (``searchsorted(neg, pos, side='left')``)."""
    if pos.size == 0 or neg.size == 0:
        return None
    # ties with a negative: only where the negative at ``below`` equals the positive
    tied = np.flatnonzero(neg.take(np.minimum(below, neg.size - 1)) == pos)
    ties = np.searchsorted(neg, pos.take(tied), side="right") - below.take(tied)
    u = float(np.sum(below, dtype=np.int64)) + 0.5 * float(np.sum(ties, dtype=np.int64))
    return u / (pos.size * neg.size)
