"""Adjusted p-values for a family of tests (segments, metrics): Bonferroni, Holm, BH."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.errors import StatsInputError
from monitor.stats import _validation as v

__all__ = ["adjust_pvalues"]

METHODS = ("bonferroni", "holm", "bh")


def adjust_pvalues(pvalues: ArrayLike, *, method: str = "holm") -> NDArray[np.float64]:
    """Adjusted p-values, in the input order; reject H_i when adjusted_i <= alpha.

    With p_(1) <= ... <= p_(m) (stable sort) and clipping to 1:

    * 'bonferroni': m p_i (family-wise error, any dependence);
    * 'holm' (Holm 1979): running max over i of (m - i + 1) p_(i) (family-wise error, any
      dependence, uniformly more powerful than Bonferroni);
    * 'bh' (Benjamini & Hochberg 1995): running min from the top of m p_(i) / i (false discovery
      rate; valid under independence and positive dependence, PRDS).
    """
    method = v.choice(method, "method", METHODS)
    p = v.sample(pvalues, "pvalues")
    if ((p < 0) | (p > 1)).any():
        bad = float(p[(p < 0) | (p > 1)][0])
        raise StatsInputError(f"`pvalues` must lie in [0, 1]; got {bad!r}.")
    m = p.size
    if method == "bonferroni":
        return np.minimum(p * m, 1.0)
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    if method == "holm":
        adjusted = np.maximum.accumulate((m - np.arange(m)) * ranked)
    else:
        adjusted = np.minimum.accumulate((m * ranked / np.arange(1, m + 1))[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out
