"""Per-query IR metrics from a ranked run and graded judgments, computed for all queries at once.

The inputs are integer codes (queries ``0 .. n_queries - 1``, documents into one vocabulary shared
by the run and the judgments), so this module never sees an id string; the reader that builds the
codes translates them back. Every metric is computed with sorts, ``bincount`` and cumulative sums
over the rows: no Python loop over queries or rows, and no query-by-cutoff matrix.

Conventions (the contract ``docs/statistics.md`` quotes; see :func:`ranking_metrics` for all):

* Order within a query: ``rank`` ascending when given (ties: ``score`` descending, then docno
  descending); otherwise ``score`` descending, ties by docno descending, which is trec_eval's own
  order (it ignores the rank column).
* Unjudged documents have grade 0. A query with no relevant document (R = 0: none judged at
  ``relevant_grade`` or above) gets NaN for the binary metrics (AP, RR, P@k, R@k, R-precision),
  and nDCG NaN when its ideal DCG is 0 (no document judged above grade 0; with
  ``relevant_grade`` above 1 a query with only lower grades has an nDCG): a NaN cannot show
  decay, and the monitor leaves that query out of that metric.
* nDCG: linear gain (the grade) or exponential gain (2^grade - 1), discount 1 / log2(i + 1) at
  position i, ideal DCG from the grades of every judged document of the query (Järvelin &
  Kekäläinen 2002, with the log2(i + 1) discount of Burges et al. 2005), as trec_eval's
  ``ndcg_cut``. nDCG' scores the condensed list with unjudged documents removed (Sakai 2007).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.errors import ConflictingJudgmentsError, StatsInputError
from monitor.stats import _validation as v

__all__ = [
    "JudgmentSummary",
    "MetricSpec",
    "RankingMetrics",
    "judgment_summary",
    "ordinal_codes",
    "parse_metric",
    "placed_metrics",
    "ranking_metrics",
]

FloatArray: TypeAlias = NDArray[np.float64]
IntArray: TypeAlias = NDArray[np.int64]
BoolArray: TypeAlias = NDArray[np.bool_]

KINDS = ("ndcg", "ndcg_cond", "ap", "rprec", "rr", "p", "r", "judged")
ACCEPTED = (
    "ndcg@K, ndcg, ndcg'@K, ndcg', ap (or map), rprec, rr (or mrr), p@K, r@K, judged@K "
    "(case-insensitive, K an integer >= 1)"
)
_GAINS = ("linear", "exponential")
_PATTERN = re.compile(r"(ndcg'|ndcg|map|ap|rprec|mrr|rr|p|r|judged)(?:@([0-9]+))?")
_ALIASES = {"map": "ap", "mrr": "rr", "ndcg'": "ndcg_cond"}
_NEEDS_K = frozenset({"p", "r", "judged"})
_NO_K = frozenset({"ap", "rprec", "rr"})
# Composite sort keys stay below this, so that packing them cannot overflow int64; above it the
# components are folded with dense re-ranking instead (tests lower it to exercise that path).
_KEY_LIMIT = 1 << 62
_PACK_LIMIT = _KEY_LIMIT


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A parsed metric name: canonical ``name`` (e.g. ``"ndcg@10"``), ``kind`` and cutoff ``k``.

    ``kind`` is one of ``ndcg``, ``ndcg_cond`` (nDCG' on the condensed list), ``ap``, ``rprec``,
    ``rr``, ``p``, ``r``, ``judged``; ``k`` is None for the whole run.
    """

    name: str
    kind: str
    k: int | None


@dataclass(frozen=True, slots=True)
class RankingMetrics:
    """Per-query metric values, one array of length ``n_queries`` per canonical metric name.

    ``relevant``: R per query (judged documents with grade >= relevant_grade, retrieved or not);
    ``returned``: results per query after dropping duplicates; ``duplicates``: duplicate
    (query, document) run rows dropped; ``defined``: R > 0 (the queries the binary metrics
    are defined for; nDCG's are those with a finite value).
    """

    metrics: dict[str, FloatArray]
    n_queries: int
    relevant: IntArray
    returned: IntArray
    duplicates: int
    defined: BoolArray


@dataclass(frozen=True, slots=True)
class JudgmentSummary:
    """What the metrics need of the judgments, per query: ``relevant`` (R: judged documents with
    grade >= ``relevant_grade``) and ``ideal`` (the ideal DCG by cutoff, None = the whole list,
    for ``gain``). Computed once per judgment set by :func:`judgment_summary`."""

    relevant: IntArray
    ideal: dict[int | None, FloatArray]
    gain: str
    relevant_grade: float

    @property
    def n_queries(self) -> int:
        return int(self.relevant.size)

    def padded(self, n_queries: int) -> JudgmentSummary:
        """The same summary over ``n_queries`` >= its own: the added queries have no
        judgment (R = 0, ideal DCG 0)."""
        extra = n_queries - self.n_queries
        if extra < 0:
            raise StatsInputError(
                f"`n_queries` must be >= {self.n_queries} (the summary's); got {n_queries}."
            )
        if extra == 0:
            return self
        return JudgmentSummary(
            relevant=np.concatenate([self.relevant, np.zeros(extra, dtype=np.int64)]),
            ideal={k: np.concatenate([v, np.zeros(extra)]) for k, v in self.ideal.items()},
            gain=self.gain,
            relevant_grade=self.relevant_grade,
        )


def parse_metric(name: str) -> MetricSpec:
    """Parse a metric name; the accepted forms are listed in :data:`ACCEPTED`.

    ``ndcg@K``/``ndcg`` (cut at K / whole run), ``ndcg'@K``/``ndcg'`` (condensed list), ``ap``
    (alias ``map``), ``rprec``, ``rr`` (alias ``mrr``), ``p@K``, ``r@K``, ``judged@K``.
    Case-insensitive, surrounding blanks ignored; the canonical name is lower case with the alias
    resolved (``"MAP"`` -> ``"ap"``, ``"NDCG'@5"`` -> ``"ndcg'@5"``).
    """
    return _parse(name, "name")


def _parse(name: object, param: str) -> MetricSpec:
    text = name.strip().lower() if isinstance(name, str) else None
    match = _PATTERN.fullmatch(text) if text is not None else None
    if match is None:
        raise StatsInputError(f"`{param}` must be a metric name, one of {ACCEPTED}; got {name!r}.")
    word, digits = match.group(1), match.group(2)
    kind = _ALIASES.get(word, word)
    k = int(digits) if digits is not None else None
    if (k is not None and k < 1) or (k is None and kind in _NEEDS_K) or (k and kind in _NO_K):
        raise StatsInputError(f"`{param}` must be a metric name, one of {ACCEPTED}; got {name!r}.")
    base = {"ndcg_cond": "ndcg'", "ap": "ap", "rr": "rr"}.get(kind, kind)
    return MetricSpec(name=base if k is None else f"{base}@{k}", kind=kind, k=k)


def ranking_metrics(
    run_query: ArrayLike,
    run_doc: ArrayLike,
    judged_query: ArrayLike,
    judged_doc: ArrayLike,
    grade: ArrayLike,
    *,
    n_queries: int,
    metrics: Sequence[str],
    rank: ArrayLike | None = None,
    score: ArrayLike | None = None,
    relevant_grade: float = 1.0,
    gain: Literal["linear", "exponential"] = "linear",
) -> RankingMetrics:
    """Per-query IR metrics of a ranked run against graded judgments.

    The run is one row per (query, document): ``run_query``, ``run_doc`` and ``rank`` and/or
    ``score``; the judgments one row per (query, document, grade). Query codes lie in
    ``0 .. n_queries - 1``; document codes index one vocabulary shared by run and judgments,
    numbered in docno string order (the tie rule below depends on it).

    Rules:

    * Order within a query: by ``rank`` ascending if given, ties in rank broken by ``score``
      descending (when given), then docno descending; else by ``score`` descending, ties by
      docno descending. The latter is trec_eval's order (it ignores the rank column and sorts by
      score, then docno descending). At least one of ``rank`` and ``score`` is required.
      Position i = 1, 2, ... counts the results of the query in this order.
    * Duplicate (query, document) run rows: the best-placed one is kept, the others are dropped
      before positions are counted, and their number is reported in ``duplicates``.
    * Judgments: duplicate (query, document) rows with the same grade are merged; with different
      grades :class:`~monitor.errors.ConflictingJudgmentsError` names the query and document codes
      and the two grades. Grades must be finite and >= 0.
    * Unjudged documents count as grade 0 (not relevant) for every metric except judged@k and
      nDCG'. A run shorter than k has non-relevant documents in the missing positions (P@k
      divides by k, as trec_eval).
    * Binary metrics: relevant means grade >= ``relevant_grade``; R is the number of judged
      relevant documents of the query, retrieved or not.
    * nDCG@k = DCG@k / IDCG@k, DCG@k = sum_{i <= k} g(grade_i) / log2(i + 1), g = grade
      (``gain='linear'``, trec_eval's ``ndcg_cut``) or 2^grade - 1 (``'exponential'``); IDCG@k
      is the DCG@k of the grades of every judged document of the query sorted descending.
      ``ndcg`` without k takes the whole run and every judged document (trec_eval ``ndcg``).
      Gains use the grades, not ``relevant_grade``. NaN where IDCG = 0 (no positive grade).
    * nDCG'@k: nDCG@k of the run with its unjudged documents removed (condensed list, Sakai
      2007); same ideal.
    * AP = sum over relevant documents retrieved at position i of P@i, divided by R, over the
      whole run (trec_eval ``map``); R-precision = P@R (``Rprec``); RR = 1 / position of the
      first relevant document in the whole run, 0 if none (``recip_rank``); P@k = relevant in
      the top k / k (``P_k``); R@k = relevant in the top k / R (``recall_k``).
    * judged@k: share of the first min(k, returned) results that have a judgment (any grade, 0
      included); NaN for a query without results. It does not need R > 0.
    * The binary metrics are NaN for a query with R = 0, nDCG when its ideal DCG is 0 (which
      R = 0 implies only at ``relevant_grade`` <= the lowest grade above 0); ``defined`` says
      which queries have R > 0. trec_eval gives such queries 0 (and skips queries without any
      judgment); the monitor excludes them because they cannot show decay.
    * A query that appears only in the judgments has ``returned = 0`` and metric 0 where R > 0
      (judged@k NaN); a query in neither has every metric NaN.

    ``metrics`` entries are parsed with :func:`parse_metric`; entries naming the same metric
    (``"map"`` and ``"ap"``) give one key. Cost: three sorts of the run rows (the score values,
    the packed placement key, the packed (query, document, position) key; integral ranks in a
    short range need no sort of their own), two of the judgment rows, and a binary search of the
    run's (query, document) pairs in the judgments; memory about 1.5 times the input arrays.
    """
    n_queries = v.integer(n_queries, "n_queries", minimum=0)
    specs = _specs(metrics)
    gain = v.choice(gain, "gain", _GAINS)  # type: ignore[assignment]
    relevant_grade = v.real(relevant_grade, "relevant_grade", low=0.0, low_open=True)
    rq = _codes(run_query, "run_query", n_queries)
    rd = _codes(run_doc, "run_doc", None)
    jq = _codes(judged_query, "judged_query", n_queries)
    jd = _codes(judged_doc, "judged_doc", None)
    g = v.sample(grade, "grade", min_size=0)
    if rank is None and score is None:
        raise StatsInputError("at least one of `rank` and `score` is required to order the run.")
    rk = None if rank is None else v.sample(rank, "rank", min_size=0)
    sc = None if score is None else v.sample(score, "score", min_size=0)
    for arr, name in ((rd, "run_doc"), (rk, "rank"), (sc, "score")):
        _same_length(arr, name, rq, "run_query", "one per run row")
    for arr, name in ((jd, "judged_doc"), (g, "grade")):
        _same_length(arr, name, jq, "judged_query", "one per judgment row")
    _non_negative(g)

    n_docs = max(int(rd.max(initial=0)), int(jd.max(initial=0))) + 1
    if n_queries * n_docs >= _KEY_LIMIT:  # a sparse vocabulary: renumber in the same order
        _, inverse = np.unique(np.concatenate([rd, jd]), return_inverse=True)
        rd, jd = inverse[: rd.size].astype(np.int64), inverse[rd.size :].astype(np.int64)
        n_docs = int(inverse.max(initial=0)) + 1
    if n_queries * n_docs >= _KEY_LIMIT:
        raise StatsInputError(
            f"`n_queries` times the number of distinct documents must be below 2**62; "
            f"got {n_queries} x {n_docs}."
        )
    judged = _Judgments.build(jq, jd, g, n_queries, n_docs, relevant_grade, gain, _cutoffs(specs))
    run = _Run.build(rq, rd, rk, sc, n_queries, n_docs, judged, relevant_grade)
    summary = judged.summary
    out = {
        name: _metric(spec, run, summary.relevant, summary.ideal, summary.gain)
        for name, spec in specs.items()
    }
    return RankingMetrics(
        metrics=out,
        n_queries=n_queries,
        relevant=summary.relevant,
        returned=run.returned,
        duplicates=run.duplicates,
        defined=summary.relevant > 0,
    )


def judgment_summary(
    judged_query: ArrayLike,
    grade: ArrayLike,
    *,
    n_queries: int,
    metrics: Sequence[str],
    relevant_grade: float = 1.0,
    gain: Literal["linear", "exponential"] = "linear",
) -> JudgmentSummary:
    """R and the ideal DCG (for the nDCG cutoffs among ``metrics``) of each query.

    One row per judged (query, document): the caller has merged duplicate judgments (the
    rules of :func:`ranking_metrics`). Query codes lie in ``0 .. n_queries - 1``; grades are
    finite and >= 0.
    """
    n_queries = v.integer(n_queries, "n_queries", minimum=0)
    specs = _specs(metrics)
    gain = v.choice(gain, "gain", _GAINS)  # type: ignore[assignment]
    relevant_grade = v.real(relevant_grade, "relevant_grade", low=0.0, low_open=True)
    jq = _codes(judged_query, "judged_query", n_queries)
    g = v.sample(grade, "grade", min_size=0)
    _same_length(g, "grade", jq, "judged_query", "one per judgment row")
    _non_negative(g)
    codes, n_grades, values = ordinal_codes(g)
    return _summary(jq, codes, n_grades, values, n_queries, relevant_grade, gain, _cutoffs(specs))


def placed_metrics(
    row_list: ArrayLike,
    grade: ArrayLike,
    judged: ArrayLike,
    *,
    list_query: ArrayLike,
    summary: JudgmentSummary,
    metrics: Sequence[str],
    duplicates: int = 0,
) -> RankingMetrics:
    """Per-list metrics of ranked lists that are already placed: the rows of list 0, then of
    list 1, ..., each list best first, without duplicate documents; ``grade`` is a row's judged
    grade (0 where unjudged) and ``judged`` whether it has a judgment. List ``i`` belongs to
    query ``list_query[i]``, whose R and ideal DCG come from ``summary``.

    The formulas and NaN rules are those of :func:`ranking_metrics`, with lists in place of
    queries (``n_queries`` of the result is the number of lists; ``duplicates`` is passed
    through: the caller dropped them while placing).
    """
    specs = _specs(metrics)
    if not isinstance(summary, JudgmentSummary):
        raise StatsInputError(f"`summary` must be a JudgmentSummary; got {type(summary).__name__}.")
    lq = _codes(list_query, "list_query", summary.n_queries)
    n_lists = int(lq.size)
    rl = _codes(row_list, "row_list", n_lists)
    g = v.sample(grade, "grade", min_size=0)
    v.refuse_masked(judged, "judged")
    j = np.asarray(judged)
    if j.dtype != np.bool_ or j.ndim != 1:
        raise StatsInputError(f"`judged` must be a 1-D boolean array; got dtype {j.dtype}.")
    for arr, name in ((g, "grade"), (j, "judged")):
        _same_length(arr, name, rl, "row_list", "one per row")
    _non_negative(g)
    if rl.size > 1 and bool(np.any(rl[1:] < rl[:-1])):
        row = int(np.argmax(rl[1:] < rl[:-1])) + 1
        raise StatsInputError(
            f"`row_list` must be sorted (the rows of each list together, lists in order); "
            f"list {rl[row]} follows list {rl[row - 1]} at row {row}."
        )
    for spec in specs.values():
        if spec.kind in ("ndcg", "ndcg_cond") and spec.k not in summary.ideal:
            raise StatsInputError(
                f"`summary` has no ideal DCG for {spec.name!r}: build it with this metric."
            )
    run = _Run.of(rl, j, g, n_lists, summary.relevant_grade, int(duplicates))
    big_r = summary.relevant[lq]
    ideal = {k: values[lq] for k, values in summary.ideal.items()}
    out = {name: _metric(spec, run, big_r, ideal, summary.gain) for name, spec in specs.items()}
    return RankingMetrics(
        metrics=out,
        n_queries=n_lists,
        relevant=big_r,
        returned=run.returned,
        duplicates=int(duplicates),
        defined=big_r > 0,
    )


def _specs(metrics: Sequence[str]) -> dict[str, MetricSpec]:
    if isinstance(metrics, str) or not isinstance(metrics, Sequence):
        raise StatsInputError(
            f"`metrics` must be a sequence of metric names (a list, not one string); "
            f"got {metrics!r}."
        )
    specs = {}
    for i, name in enumerate(metrics):
        spec = _parse(name, f"metrics[{i}]")
        specs[spec.name] = spec
    return specs


def _cutoffs(specs: dict[str, MetricSpec]) -> set[int | None]:
    return {spec.k for spec in specs.values() if spec.kind in ("ndcg", "ndcg_cond")}


def _non_negative(g: FloatArray) -> None:
    if g.size and float(g.min()) < 0.0:
        row = int(np.argmin(g))
        raise StatsInputError(f"`grade` must be >= 0; got {g[row]:g} at row {row}.")


# --------------------------------------------------------------------------------------------
# Validation


def _codes(x: ArrayLike, name: str, n: int | None) -> IntArray:
    """``x`` as a 1-D int64 array of codes >= 0 (and < n when n is given)."""
    v.refuse_masked(x, name)
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:  # ragged nested sequences
        raise StatsInputError(f"`{name}` must be a 1-D array of integer codes.") from exc
    if arr.ndim != 1:
        raise StatsInputError(f"`{name}` must be 1-D; got an array of shape {arr.shape}.")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise StatsInputError(f"`{name}` must be an array of integer codes; got dtype {arr.dtype}.")
    codes = arr.astype(np.int64, copy=False)
    low, high = int(codes.min()), int(codes.max())
    if low < 0 or (n is not None and high >= n):
        row = int(np.argmin(codes)) if low < 0 else int(np.argmax(codes))
        allowed = f"in [0, {n}) (`n_queries` = {n})" if n is not None else ">= 0"
        raise StatsInputError(f"`{name}` codes must be {allowed}; got {codes[row]} at row {row}.")
    return codes


def _same_length(
    arr: NDArray[np.generic] | None, name: str, ref: IntArray, ref_name: str, what: str
) -> None:
    if arr is not None and arr.size != ref.size:
        raise StatsInputError(
            f"`{name}` must have the same length as `{ref_name}` ({what}); "
            f"got {arr.size} and {ref.size}."
        )


# --------------------------------------------------------------------------------------------
# Sort keys
#
# A row order is a list of integer components (code, bound, descending), compared
# lexicographically. When the product of the bounds fits in int64 the components are packed in
# place into one key, sorted by value (``ndarray.sort``: no index array, no gathers) and unpacked;
# otherwise the key is folded with dense re-ranking and sorted indirectly. A component whose
# code is None is the row number (0 .. n - 1).

Part: TypeAlias = tuple[IntArray | None, int, bool]
_EMPTY = np.zeros(0, dtype=np.int64)


def ordinal_codes(x: FloatArray, *, keep_values: bool = True) -> tuple[IntArray, int, FloatArray]:
    """Order-preserving codes 0 .. u - 1 of ``x`` (equal values equal codes), u, and the values.

    Integral values in a short range (ranks, grades) are shifted, not sorted. ``values[code]``
    is the value of a code (empty when ``keep_values`` is false and the values were sorted).
    """
    if x.size == 0:
        return np.zeros(0, dtype=np.int64), 1, np.zeros(1)
    low, high = float(x.min()), float(x.max())
    exact = low >= -(2.0**53) and high <= 2.0**53  # integers that float64 and int64 share
    if exact and high - low <= 4 * x.size + 1024 and np.array_equal(x, np.floor(x)):
        span = int(high - low) + 1
        codes = x.astype(np.int64)
        codes -= int(low)
        return codes, span, low + np.arange(span, dtype=np.float64)
    order = np.argsort(x)
    xs = x[order]
    new = np.empty(x.size, dtype=bool)
    new[0] = True
    np.not_equal(xs[1:], xs[:-1], out=new[1:])
    values = xs[new] if keep_values else np.zeros(0)
    ranks = xs.view(np.int64)  # reuse the sorted copy's memory for the ranks
    np.cumsum(new, out=ranks)
    ranks -= 1
    size = int(ranks[-1]) + 1
    del new
    codes = np.empty(x.size, dtype=np.int64)
    codes[order] = ranks
    return codes, size, values


def _dense(key: IntArray) -> tuple[IntArray, int]:
    """Dense ranks 0 .. u - 1 of an integer key (equal keys share a rank) and u."""
    order = np.argsort(key)
    ks = key[order]
    new = np.zeros(key.size, dtype=np.int64)
    np.not_equal(ks[1:], ks[:-1], out=new[1:], casting="unsafe")
    codes = np.empty(key.size, dtype=np.int64)
    codes[order] = np.cumsum(new)
    return codes, int(codes.max(initial=0)) + 1


def _component(part: Part, n: int, *, consume: bool = False) -> IntArray:
    """The codes of ``part`` as a fresh int64 array (``consume``: may be the given array)."""
    codes, size, descending = part
    if codes is None:
        out = np.arange(n, dtype=np.int64)
    else:
        out = codes if consume and codes.dtype == np.int64 else codes.astype(np.int64)
    if descending:
        np.subtract(size - 1, out, out=out)
    return out


def _sorted_parts(
    parts: list[Part], wanted: Sequence[bool], n: int, *, consume: bool = False
) -> list[IntArray]:
    """The ``wanted`` components of the n rows sorted by ``parts`` (an empty array for others).

    Rows whose components are all equal are interchangeable, so the sort need not be stable.
    Descending components come back as they were given (not reversed). ``consume``: the first
    component's array may be overwritten, and ``parts`` drops each array once it is packed (the
    caller holds no other reference to the arrays it wants freed early).
    """
    sizes = [max(size, 1) for _, size, _ in parts]
    out = [_EMPTY] * len(parts)
    if math.prod(sizes) < _PACK_LIMIT:
        key = _component(parts[0], n, consume=consume)
        for i in range(1, len(parts)):
            codes, size, descending = parts[i]
            key *= sizes[i]
            if codes is None:
                key += np.arange(n, dtype=np.int64)
            elif descending:
                key += size - 1
                key -= codes
            else:
                key += codes
            if consume and codes is not None:
                parts[i] = (_EMPTY, size, descending)
            del codes
        key.sort()
        for i in range(len(parts) - 1, -1, -1):
            if wanted[i]:
                value = key % sizes[i] if i > 0 else key
                if parts[i][2]:
                    np.subtract(parts[i][1] - 1, value, out=value)
                out[i] = value
            if i > 0 and any(wanted[:i]):
                key //= sizes[i]
        return out
    # fallback: the components must survive (they are gathered below), so nothing is consumed
    key, bound = _component(parts[0], n), sizes[0]
    for part, size in zip(parts[1:], sizes[1:], strict=True):
        comp, comp_size = _component(part, n), size
        if bound * comp_size >= _PACK_LIMIT:
            key, bound = _dense(key)
            if bound * comp_size >= _PACK_LIMIT:
                comp, comp_size = _dense(comp)
        key *= comp_size
        key += comp
        bound *= comp_size
    order = np.argsort(key)
    del key
    for i, (codes, _, _) in enumerate(parts):
        if wanted[i]:
            out[i] = order.astype(np.int64) if codes is None else codes[order]
    return out


def _group_starts(group: IntArray, n_groups: int) -> tuple[IntArray, IntArray]:
    """Rows per group and the 0-based position of each row in its group (rows sorted by group)."""
    counts = np.bincount(group, minlength=n_groups).astype(np.int64)
    starts = np.cumsum(counts) - counts
    position = np.arange(group.size, dtype=np.int64)
    position -= starts[group]
    return counts, position


def _discount(position: IntArray) -> FloatArray:
    """1 / log2(i + 1) for the 0-based position i - 1 (from a table: positions repeat)."""
    table = 1.0 / np.log2(np.arange(int(position.max(initial=0)) + 1) + 2.0)
    return np.asarray(table[position], dtype=np.float64)


def _gain(grade: FloatArray, gain: str) -> FloatArray:
    return grade if gain == "linear" else np.exp2(grade) - 1.0


# --------------------------------------------------------------------------------------------
# Judgments and run


@dataclass(frozen=True, slots=True)
class _Judgments:
    """Unique judgments sorted by (query, document), and the per-query ideal-DCG inputs."""

    key: IntArray  # query * n_docs + doc, sorted, unique
    grade: FloatArray
    summary: JudgmentSummary

    @classmethod
    def build(
        cls,
        jq: IntArray,
        jd: IntArray,
        g: FloatArray,
        n_queries: int,
        n_docs: int,
        relevant_grade: float,
        gain: str,
        cutoffs: set[int | None],
    ) -> _Judgments:
        m = jq.size
        codes, n_grades, values = ordinal_codes(g)
        pair = jq * n_docs
        pair += jd
        key, code = _sorted_parts(
            [(pair, n_queries * n_docs, False), (codes, n_grades, False)],
            [True, True],
            m,
            consume=True,
        )
        del pair, codes
        same = key[1:] == key[:-1]
        clash = same & (code[1:] != code[:-1])
        if clash.any():
            i = int(np.argmax(clash))
            q_code, d_code = divmod(int(key[i]), n_docs)
            grades = (float(values[code[i]]), float(values[code[i + 1]]))
            raise ConflictingJudgmentsError(q_code, d_code, grades)
        if same.any():
            keep = np.ones(key.size, dtype=bool)
            keep[1:] = ~same
            key, code = key[keep], code[keep]
        grade = values[code]
        summary = _summary(
            key // n_docs, code, n_grades, values, n_queries, relevant_grade, gain, cutoffs
        )
        return cls(key=key, grade=grade, summary=summary)


def _summary(
    query: IntArray,
    code: IntArray,
    n_grades: int,
    values: FloatArray,
    n_queries: int,
    relevant_grade: float,
    gain: str,
    cutoffs: set[int | None],
) -> JudgmentSummary:
    """R and the ideal DCG per query from unique judgments (grade ``values[code]``)."""
    grade = values[code]
    relevant = np.bincount(query[grade >= relevant_grade], minlength=n_queries)
    # ideal order: query ascending, grade descending
    ideal_query, ideal_code = _sorted_parts(
        [(query, n_queries, False), (code, n_grades, True)], [True, True], query.size
    )
    _, position = _group_starts(ideal_query, n_queries)
    weight = _gain(values[ideal_code], gain) * _discount(position)
    ideal = {}
    for k in sorted(cutoffs, key=lambda c: -1 if c is None else c):
        cut = slice(None) if k is None else position < k
        ideal[k] = _sum_by(ideal_query[cut], weight[cut], n_queries)
    return JudgmentSummary(
        relevant=relevant.astype(np.int64),
        ideal=ideal,
        gain=gain,
        relevant_grade=relevant_grade,
    )


@dataclass(frozen=True, slots=True)
class _Run:
    """What the metrics read of placed rows (groups: queries, or lists; each group's rows
    together, best first, without duplicates): ``returned`` rows per group, and only the
    judged rows (every other row has grade 0: no gain, not relevant), by their ``group``,
    0-based ``position`` in the group's whole list and ``grade``; ``rel_group`` /
    ``rel_position`` the relevant ones (grade >= relevant_grade > 0, so judged)."""

    returned: IntArray
    group: IntArray
    position: IntArray
    grade: FloatArray
    rel_group: IntArray
    rel_position: IntArray
    duplicates: int

    @classmethod
    def of(
        cls,
        group: IntArray,
        judged: BoolArray,
        grade: FloatArray,
        n_groups: int,
        relevant_grade: float,
        duplicates: int,
    ) -> _Run:
        """From every placed row's group (sorted), judged flag and grade."""
        returned = np.bincount(group, minlength=n_groups).astype(np.int64)
        rows = np.flatnonzero(judged)  # (indices and take: a boolean mask selects slowly)
        g = group.take(rows)
        grade = grade.take(rows)
        start = np.cumsum(returned)
        start -= returned
        rows -= start.take(g)
        rel = np.flatnonzero(grade >= relevant_grade)
        return cls(returned, g, rows, grade, g.take(rel), rows.take(rel), duplicates)

    @classmethod
    def build(
        cls,
        rq: IntArray,
        rd: IntArray,
        rank: FloatArray | None,
        score: FloatArray | None,
        n_queries: int,
        n_docs: int,
        judgments: _Judgments,
        relevant_grade: float,
    ) -> _Run:
        n = rq.size
        # Placement: query, rank ascending, score descending, docno descending.
        parts: list[Part] = [(rq, n_queries, False)]
        if rank is not None:
            codes, n_ranks, _ = ordinal_codes(rank, keep_values=False)
            parts.append((codes, n_ranks, False))
            del codes
        if score is not None:
            codes, n_scores, _ = ordinal_codes(score, keep_values=False)
            parts.append((codes, n_scores, True))
            del codes
        parts.append((rd, n_docs, True))
        wanted = [True] + [False] * (len(parts) - 2) + [True]
        # rq is the caller's array: copy it as the key; the rank and score codes are freed
        parts[0] = (rq.copy(), n_queries, False)
        placed = _sorted_parts(parts, wanted, n, consume=True)
        del parts
        query, doc = placed[0], placed[-1]
        del placed

        # (query, document) order, best placed first: drop duplicates, join the judgments.
        pair = query * n_docs
        pair += doc
        del doc
        pair, place = _sorted_parts(
            [(pair, n_queries * n_docs, False), (None, n, False)], [True, True], n, consume=True
        )
        first = np.ones(n, dtype=bool)
        np.not_equal(pair[1:], pair[:-1], out=first[1:])
        duplicates = n - int(np.count_nonzero(first))
        # grade and judged flag in (query, document) order, then scattered to placement order
        # (each query's rows are contiguous in both, so the scatter stays local)
        m = judgments.key.size
        if m:
            hit = np.searchsorted(judgments.key, pair)
            np.minimum(hit, m - 1, out=hit)
            found = judgments.key[hit] == pair
            del pair
            if duplicates:
                found &= first
            by_pair = judgments.grade[hit]
            del hit
            by_pair *= found  # grades are finite: unjudged (and dropped duplicates) become 0
            grade = np.empty(n)
            grade[place] = by_pair
            del by_pair
            judged = np.empty(n, dtype=bool)
            judged[place] = found
            del found
        else:
            grade, judged = np.zeros(n), np.zeros(n, dtype=bool)
        if duplicates:
            keep = np.zeros(n, dtype=bool)
            keep[place[first]] = True
            del place
            query, grade, judged = query[keep], grade[keep], judged[keep]
        return cls.of(query, judged, grade, n_queries, relevant_grade, duplicates)


# --------------------------------------------------------------------------------------------
# Metrics


def _metric(
    spec: MetricSpec,
    run: _Run,
    big_r: IntArray,
    ideal: dict[int | None, FloatArray],
    gain: str,
) -> FloatArray:
    """One metric per group of ``run`` (a query, or a list): ``big_r`` and ``ideal`` per group.
    Reads the judged rows only: an unjudged row adds nothing to a sum (a gain of 0, adding 0.0
    changes no float sum) and only counts toward ``returned``."""
    n_groups = run.returned.size
    k = spec.k
    if spec.kind in ("ndcg", "ndcg_cond"):
        group, position, grade = run.group, run.position, run.grade
        if spec.kind == "ndcg_cond":  # positions in the condensed list: among judged rows
            _, position = _group_starts(group, n_groups)
        if k is not None:
            cut = np.flatnonzero(position < k)
            group, position, grade = group.take(cut), position.take(cut), grade.take(cut)
        weight = _gain(grade, gain) * _discount(position)
        dcg = _sum_by(group, weight, n_groups)
        return _divide(dcg, ideal[k])
    if spec.kind == "judged":
        assert k is not None
        hits = _count(run.group, run.position < k, n_groups)
        return _divide(hits, np.minimum(run.returned, k).astype(np.float64))

    q_rel, p_rel = run.rel_group, run.rel_position
    if spec.kind == "p":
        assert k is not None
        value = _count(q_rel, p_rel < k, n_groups) / k
    elif spec.kind == "r":
        value = _count(q_rel, p_rel < (k or 0), n_groups)
        value = _divide(value, big_r.astype(np.float64))
    elif spec.kind == "rprec":
        value = _count(q_rel, p_rel < big_r[q_rel], n_groups)
        value = _divide(value, big_r.astype(np.float64))
    elif spec.kind == "rr":
        first = np.ones(q_rel.size, dtype=bool)
        first[1:] = q_rel[1:] != q_rel[:-1]
        value = np.zeros(n_groups)
        value[q_rel[first]] = 1.0 / (p_rel[first] + 1.0)
    else:  # ap: the i-th relevant document of a group, at position p, adds i / p
        _, nth = _group_starts(q_rel, n_groups)
        precision = (nth + 1.0) / (p_rel + 1.0)
        value = _divide(_sum_by(q_rel, precision, n_groups), big_r.astype(np.float64))
    return np.where(big_r > 0, value, np.nan)


def _count(query: IntArray, mask: BoolArray, n_queries: int) -> FloatArray:
    """Rows per query where ``mask`` holds, as floats."""
    return np.bincount(query.take(np.flatnonzero(mask)), minlength=n_queries).astype(np.float64)


def _sum_by(query: IntArray, weight: FloatArray, n_queries: int) -> FloatArray:
    """Sum of ``weight`` per query, adding rows in order."""
    return np.asarray(np.bincount(query, weights=weight, minlength=n_queries), dtype=np.float64)


def _divide(num: FloatArray, den: FloatArray) -> FloatArray:
    """num / den with NaN where den == 0 (no warning)."""
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out
