"""The run-label permutation test: paired outcomes when a key was evaluated several times.

A key's outcome in a window is the mean of its runs (a 7-day reference holds 7 daily runs of
each golden query). d = mean(current runs) - mean(reference runs) is then not symmetric about
0 under "no change" when a query's run-to-run variation is skewed (a hard query that finds its
document in a tenth of the runs), so flipping its sign is not an exact null: measured, 17 % of
months raised a false decay for a 5 % budget (``bench/decay_skew.py``). What is exchangeable
under "no change" is the runs themselves: within a key, which of its k = m + n runs are the
current n does not matter.

Conventions (see ``docs/statistics.md``, "Decay"):

* Per key q with m reference and n current runs (the current shifted by the margin's shift
  first, as the sign flips test d + margin), its k runs in a cycle: the reference's in their
  order, then the current's. A *rotation* c in [0, k) labels the n runs at c, c + 1, ...,
  c + n - 1 (mod k) current; c = m is the observed labelling. d_q(c) = S/n - (total - S)/m of
  the rotated current sum S, rounded to 12 decimals as ``round_differences``.
* T = sum_q d_q(m); null statistics T* = sum_q d_q(c_q), c_q drawn uniformly and
  independently. The rotations of each key form a group (a subgroup of its k! relabellings),
  so the test is exact when the runs are exchangeable within each key and independent across
  keys (a randomization test over a group; Hemerik & Goeman 2018), and it costs at most one
  draw a key a resample whatever the run counts (keys are drawn in groups of at most 1,024
  joint rotations). With n = 1 (one new run a look) the rotations are every labelling; with
  m = n = 1 they are the sign flips.
* Exact enumeration when prod k_q <= ``n_resamples`` (p = count / prod k_q, floor 1 / prod k_q),
  otherwise Monte Carlo with p = (b + 1)/(R + 1), one-sided stopped early at the resample L
  that brings the 100th null statistic as extreme as T, p = 100 / L (Besag & Clifford 1991: a
  valid p-value; a look with no evidence draws ~100 / p resamples, one with p < 100 / R all
  R; the floor stays 1 / (R + 1)); ties within K 1e-12 (the rounding of K keys'
  d_q: equal means of different run counts round apart) + 100 eps sum_q max_c |d_q(c)|;
  two-sided p = min(2 min(p_less, p_greater), 1). The result is a ``PermutationResult`` with
  ``method = "run-label"`` and ``statistic`` = T / (number of keys), the mean shifted d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from monitor.errors import InsufficientDataError, StatsInputError
from monitor.stats import _validation as v
from monitor.stats.paired import PermutationResult, margin_shift, tail_pvalue

__all__ = ["Runs", "run_label_test", "several_runs"]

_DECIMALS = 12  # as paired.round_differences
_CHUNK_ELEMENTS = 1 << 20  # groups x resamples per chunk of draws (8 MB of indices)
_STOP = 100  # null statistics as extreme as T that end a one-sided Monte Carlo run
_FIRST_ROWS = 1 << 10  # resamples in the first chunk (a look with no evidence stops in it)
_GROUP_ENTRIES = 1 << 10  # rotations of a group of keys, one table (8 KB: stays in cache)


@dataclass(frozen=True, slots=True)
class Runs:
    """Each key's outcomes run by run: ``values`` holds the ``counts[0]`` outcomes of the first
    key, then the ``counts[1]`` of the second, and so on, each key's in a fixed order that does
    not look at the outcomes (the reader's: file, then row order). A key's outcome in a window
    is the mean of its runs (``means``)."""

    values: NDArray[np.float64]
    counts: NDArray[np.int64]

    def __post_init__(self) -> None:
        values = v.sample(self.values, "values", min_size=0)
        counts = np.asarray(self.counts)
        if counts.ndim != 1 or not np.issubdtype(counts.dtype, np.integer):
            raise StatsInputError(
                f"`counts` must be a 1-D array of integers; got {counts.dtype} of shape "
                f"{counts.shape}."
            )
        if counts.size and int(counts.min()) < 1:
            raise StatsInputError(
                f"`counts` must be at least 1 for every key; got {int(counts.min())}."
            )
        if int(counts.sum()) != values.size:
            raise StatsInputError(
                f"`counts` must add up to the number of `values`; got {int(counts.sum())} "
                f"and {values.size}."
            )
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "counts", counts.astype(np.int64, copy=False))

    @property
    def keys(self) -> int:
        """Number of keys."""
        return int(self.counts.size)

    def means(self) -> NDArray[np.float64]:
        """Each key's mean outcome (its ``counts`` values summed in order, then divided)."""
        if not self.counts.size:
            return np.empty(0, dtype=np.float64)
        starts = np.cumsum(self.counts) - self.counts
        sums: NDArray[np.float64] = np.add.reduceat(self.values, starts)
        return sums / self.counts

    def take(self, keys: NDArray[np.intp]) -> Runs:
        """The runs of ``keys`` (indices into this object's keys), in that order."""
        starts = np.cumsum(self.counts) - self.counts
        counts = self.counts[keys]
        first = np.repeat(starts[keys] - (np.cumsum(counts) - counts), counts)
        return Runs(values=self.values[first + np.arange(first.size)], counts=counts)


def several_runs(reference: Runs, current: Runs) -> bool:
    """Whether some key has more than one run on either side: the run labels decide then
    (one run a side everywhere: the rotations are the sign flips)."""
    return any(r.keys and int(r.counts.max()) > 1 for r in (reference, current))


def run_label_test(
    reference: Runs,
    current: Runs,
    *,
    alternative: str = "two-sided",
    margin: float = 0.0,
    n_resamples: int = 9999,
    rng: np.random.Generator | int | None = None,
) -> PermutationResult:
    """Run-label permutation test of mean over keys of (mean current - mean reference) = 0.

    ``reference`` and ``current`` hold the same keys in the same order. The margin shifts the
    current runs as ``paired_test`` shifts d ('less': + margin, 'greater': - margin; 0 for
    'two-sided'). See the module docstring for the rotations, the p-value and its floor.
    """
    alternative, margin, shift = margin_shift(alternative, margin)
    n_resamples = v.integer(n_resamples, "n_resamples", minimum=1)
    gen = v.generator(rng)
    if not isinstance(reference, Runs) or not isinstance(current, Runs):
        raise StatsInputError("`reference` and `current` must be Runs.")
    if reference.keys != current.keys:
        raise StatsInputError(
            f"`reference` and `current` must hold the same keys (paired by query); got "
            f"{reference.keys} and {current.keys}."
        )
    if reference.keys < 1:
        raise InsufficientDataError(
            "a run-label test needs at least 1 key; got 0.", needed=1, got=0
        )
    table, offsets, ks = _rotations(reference, current, shift)
    observed_index = offsets + reference.counts
    total = float(np.asarray(table[observed_index[None, :]].sum(axis=1))[0])
    # ties within rounding: each key's d_q(c) is rounded to 1e-12, so a null sum equal to T
    # in exact arithmetic (a mean of 3 runs against one of 1) can differ from it by up to
    # 1e-12 a key; summing in another order adds 100 eps of the largest sums
    largest = float(np.maximum.reduceat(np.abs(table), offsets).sum())
    gamma = ks.size * 10.0**-_DECIMALS + 100 * np.finfo(np.float64).eps * largest
    space = math.prod(int(k) for k in ks)  # exact big integer: compared, never a float
    exact = space <= n_resamples
    g_table, g_offsets, g_sizes = _grouped(table, offsets, ks)
    if exact:
        null = _enumerate(g_table, g_offsets, g_sizes)
        n_greater = int(np.count_nonzero(null >= total - gamma))
        n_less = int(np.count_nonzero(null <= total + gamma))
        p_greater, p_less = n_greater / space, n_less / space
        floor = 1.0 / space
        count = space
    else:
        n_greater, n_less, count = _monte_carlo(
            g_table, g_offsets, g_sizes, total, gamma, n_resamples, gen, alternative
        )
        if count < n_resamples:  # stopped at the _STOP-th as extreme (Besag & Clifford)
            p_greater = p_less = _STOP / count
        else:
            p_greater = (n_greater + 1) / (n_resamples + 1)
            p_less = (n_less + 1) / (n_resamples + 1)
        floor = 1.0 / (n_resamples + 1)
    p, floor = tail_pvalue(p_greater, p_less, floor, alternative)
    return PermutationResult(
        statistic=total / reference.keys,
        pvalue=p,
        exact=exact,
        n_resamples=count,
        min_pvalue=floor,
        method="run-label",
    )


def _monte_carlo(
    table: NDArray[np.float64],
    offsets: NDArray[np.intp],
    sizes: NDArray[np.int64],
    total: float,
    gamma: float,
    n_resamples: int,
    gen: np.random.Generator,
    alternative: str,
) -> tuple[int, int, int]:
    """(#T* >= T - gamma, #T* <= T + gamma, resamples drawn) over up to ``n_resamples`` random
    rotations, in chunks that start small and double. One-sided, it stops at the resample L
    that brings the ``_STOP``-th null statistic as extreme as T: p = _STOP / L is then a valid
    p-value (Besag & Clifford 1991), a look with no evidence costs ~_STOP / p resamples, not
    R, and a p below _STOP / R draws all R (at the monitor's R = 20 k / alpha: every p near
    Holm's first step alpha / k)."""
    rows = max(1, _CHUNK_ELEMENTS // sizes.size)
    size = min(rows, _FIRST_ROWS)
    n_greater = n_less = drawn = 0
    while drawn < n_resamples:
        size = min(size, n_resamples - drawn)
        idx = gen.integers(0, sizes, size=(size, sizes.size)) + offsets
        sums = table[idx].sum(axis=1)
        greater = sums >= total - gamma
        less = sums <= total + gamma
        if alternative != "two-sided":
            hit = less if alternative == "less" else greater
            seen = n_less if alternative == "less" else n_greater
            chunk_hits = int(np.count_nonzero(hit))
            if seen + chunk_hits >= _STOP:
                at = int(np.flatnonzero(hit)[_STOP - seen - 1]) + 1
                if drawn + at < n_resamples:
                    return _STOP, _STOP, drawn + at
        n_greater += int(np.count_nonzero(greater))
        n_less += int(np.count_nonzero(less))
        drawn += size
        size = min(2 * size, rows)
    return n_greater, n_less, n_resamples


def _rotations(
    reference: Runs, current: Runs, shift: float
) -> tuple[NDArray[np.float64], NDArray[np.intp], NDArray[np.int64]]:
    """(table, offsets, k): ``table[offsets[q] + c]`` is key q's d_q(c) for c < k[q]."""
    m, n = reference.counts, current.counts
    ks = m + n
    offsets = (np.cumsum(ks) - ks).astype(np.intp)
    total_runs = int(ks.sum())
    key = np.repeat(np.arange(ks.size), ks)
    pos = np.arange(total_runs) - np.repeat(offsets, ks)  # each run's place in its key's cycle
    pooled = np.empty(total_runs, dtype=np.float64)
    ref_slot = pos < np.repeat(m, ks)
    pooled[ref_slot] = reference.values
    pooled[~ref_slot] = current.values + shift if shift else current.values
    k_rep = np.repeat(ks, ks)
    n_rep = np.repeat(n, ks)
    m_rep = np.repeat(m, ks)
    totals = np.repeat(np.bincount(key, weights=pooled, minlength=ks.size), ks)
    # the smaller side's window of a rotation c, summed run by run: the current runs c, ...,
    # c + n - 1 (mod k) when n <= m, else the reference runs c + n, ..., c + n + m - 1 and
    # S = total - that; a loop over j up to max min(m, n), vectorised over the keys' cycles
    # (a look after an outage pools 720 hourly runs against 168: 168 steps, not 720)
    by_current = n_rep <= m_rep
    width = np.where(by_current, n_rep, m_rep)
    first = np.where(by_current, pos, pos + n_rep)
    base = np.repeat(offsets, ks)
    part = np.zeros(total_runs, dtype=np.float64)
    for j in range(int(np.minimum(m, n).max())):
        active = j < width
        src = base + (first + j) % k_rep
        part[active] += pooled[src[active]]
    sums = np.where(by_current, part, totals - part)
    d = sums / n_rep - (totals - sums) / m_rep.astype(np.float64)
    return d.round(_DECIMALS), offsets, ks


def _grouped(
    table: NDArray[np.float64], offsets: NDArray[np.intp], ks: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.intp], NDArray[np.int64]]:
    """Consecutive keys joined while their rotations number at most ``_GROUP_ENTRIES``: a
    group's table holds every sum of its keys' d_q(c) (the keys' rotations in mixed radix), so
    a resample draws and looks up once a group, not once a key (8 runs a key: a third of the
    draws and lookups). Returns (table, offsets, sizes) of the groups."""
    tables: list[NDArray[np.float64]] = []
    part = np.zeros(1, dtype=np.float64)
    for off, k in zip(offsets.tolist(), ks.tolist(), strict=True):
        if part.size > 1 and part.size * k > _GROUP_ENTRIES:
            tables.append(part)
            part = np.zeros(1, dtype=np.float64)
        part = (part[:, None] + table[off : off + k][None, :]).ravel()
    tables.append(part)
    sizes = np.array([t.size for t in tables], dtype=np.int64)
    return np.concatenate(tables), (np.cumsum(sizes) - sizes).astype(np.intp), sizes


def _enumerate(
    table: NDArray[np.float64], offsets: NDArray[np.intp], ks: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Every rotation's T* (prod k_q of them)."""
    null = np.zeros(1, dtype=np.float64)
    for off, k in zip(offsets.tolist(), ks.tolist(), strict=True):
        null = (null[:, None] + table[off : off + k][None, :]).ravel()
    return null
