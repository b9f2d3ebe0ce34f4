"""Per-query IR metrics: trec_eval parity (pytrec_eval), a plain-Python reference, validation.

How the trec_eval comparison is made fair:

* trec_eval ignores the rank column and orders a query's results by score descending, ties by
  docno descending (string order). Our score-only order is the same, and the test docnos are
  ``d000``, ``d001``, ... so string order equals code order: pytrec_eval gets the scores as they
  are. For runs with a rank column, the test orders the rows itself (rank ascending, score
  descending, docno descending, in plain Python) and gives pytrec_eval score = -position.
* pytrec_eval takes one score per (query, document), so duplicates are resolved before it sees
  the run: the best-placed row is kept, as ``ranking_metrics`` does.
* trec_eval skips queries without any judgment, and scores 0 where R = 0 (nDCG: ideal DCG = 0);
  ``ranking_metrics`` reports NaN there. The test compares values where ours are defined and
  checks that trec_eval has 0 where ours are NaN; queries trec_eval skips are checked by rule
  (no results: 0 where R > 0; no judgments: NaN).
* The binary threshold is pytrec_eval's ``relevance_level`` (= ``relevant_grade``); trec_eval's
  nDCG uses the grades as gains whatever the threshold, as ours.

judged@k, nDCG'@k and exponential gain are not trec_eval measures: they are checked against the
plain-Python per-query implementation below, and nDCG' also against pytrec_eval's ``ndcg_cut``
on the run with its unjudged documents removed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import pytrec_eval
from hypothesis import given
from hypothesis import strategies as st

from monitor.errors import ConflictingJudgmentsError, StatsInputError
from monitor.stats import MetricSpec, parse_metric, ranking
from monitor.stats import ranking_metrics as rm

TOL = 1e-12
ALL = ["ndcg@10", "ndcg@3", "ndcg", "ap", "rprec", "rr", "p@10", "p@3", "r@100", "r@5"]
ALL_OURS = [*ALL, "ndcg'@10", "ndcg'@3", "ndcg'", "judged@10", "judged@3"]
TREC = {
    "ndcg@10": "ndcg_cut_10",
    "ndcg@3": "ndcg_cut_3",
    "ndcg": "ndcg",
    "ap": "map",
    "rprec": "Rprec",
    "rr": "recip_rank",
    "p@10": "P_10",
    "p@3": "P_3",
    "r@100": "recall_100",
    "r@5": "recall_5",
}
TREC_MEASURES = {"ndcg_cut.3,10", "ndcg", "map", "Rprec", "recip_rank", "P.3,10", "recall.5,100"}


def _docno(code: int) -> str:
    return f"d{code:03d}"


# ------------------------------------------------------------------------- generated collections


@dataclass
class Collection:
    n_queries: int
    run_query: list[int]
    run_doc: list[int]
    score: list[float]
    rank: list[int]
    judged_query: list[int]
    judged_doc: list[int]
    grade: list[int]


@st.composite
def collections(draw: st.DrawFn) -> Collection:
    """Small runs with score ties, duplicates, unjudged documents, short runs, queries without
    relevant judgments and queries that appear only in the judgments (or nowhere)."""
    n_queries = draw(st.integers(1, 5))
    n_docs = draw(st.integers(1, 14))
    col = Collection(n_queries, [], [], [], [], [], [], [])
    for q in range(n_queries):
        rows = draw(
            st.lists(
                st.tuples(
                    st.integers(0, n_docs - 1),
                    st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, -1.0]),
                    st.integers(1, 6),
                ),
                max_size=12,
            )
        )
        for doc, score, rank in rows:
            col.run_query.append(q)
            col.run_doc.append(doc)
            col.score.append(score)
            col.rank.append(rank)
        judged = draw(st.dictionaries(st.integers(0, n_docs - 1), st.integers(0, 3), max_size=10))
        for doc, grade in judged.items():
            for _ in range(draw(st.integers(1, 2))):  # same-grade duplicates are merged
                col.judged_query.append(q)
                col.judged_doc.append(doc)
                col.grade.append(grade)
    return col


def _ordered(col: Collection, q: int, *, use_rank: bool) -> list[int]:
    """The documents of query q in our placement order, duplicates dropped (plain Python)."""
    rows = [
        (col.rank[i], col.score[i], col.run_doc[i])
        for i in range(len(col.run_query))
        if col.run_query[i] == q
    ]
    if use_rank:
        rows.sort(key=lambda r: (r[0], -r[1], -r[2]))
    else:
        rows.sort(key=lambda r: (-r[1], -r[2]))
    seen: set[int] = set()
    docs = []
    for _, _, doc in rows:
        if doc not in seen:
            seen.add(doc)
            docs.append(doc)
    return docs


def _qrels(col: Collection) -> dict[int, dict[int, int]]:
    out: dict[int, dict[int, int]] = {}
    for q, d, g in zip(col.judged_query, col.judged_doc, col.grade, strict=True):
        out.setdefault(q, {})[d] = g
    return out


def _ours(col: Collection, names: list[str], *, use_rank: bool, **kw: Any) -> Any:
    return rm(
        np.array(col.run_query, dtype=np.int64),
        np.array(col.run_doc, dtype=np.int64),
        np.array(col.judged_query, dtype=np.int64),
        np.array(col.judged_doc, dtype=np.int64),
        np.array(col.grade, dtype=np.float64),
        n_queries=col.n_queries,
        metrics=names,
        score=col.score,
        rank=col.rank if use_rank else None,
        **kw,
    )


def _trec(
    col: Collection, level: int, *, use_rank: bool, drop_unjudged: bool = False
) -> dict[str, dict[str, float]]:
    qrels = _qrels(col)
    run: dict[str, dict[str, float]] = {}
    for q in range(col.n_queries):
        docs = _ordered(col, q, use_rank=use_rank)
        if drop_unjudged:
            docs = [d for d in docs if d in qrels.get(q, {})]
        if not docs:
            continue
        if use_rank:
            run[str(q)] = {_docno(d): -float(i) for i, d in enumerate(docs)}
        else:
            best: dict[int, float] = {}
            for i in range(len(col.run_query)):
                if col.run_query[i] == q and (d := col.run_doc[i]) in docs:
                    best[d] = max(best.get(d, -math.inf), col.score[i])
            run[str(q)] = {_docno(d): s for d, s in best.items()}
    trec_qrels = {str(q): {_docno(d): g for d, g in j.items()} for q, j in qrels.items()}
    evaluator = pytrec_eval.RelevanceEvaluator(trec_qrels, TREC_MEASURES, relevance_level=level)
    result: dict[str, dict[str, float]] = evaluator.evaluate(run)
    return result


# ------------------------------------------------------------------------- plain-Python reference


def _reference(
    col: Collection, name: str, level: float, gain: str, *, use_rank: bool
) -> list[float]:
    """Each metric by its definition, one query at a time."""
    spec = parse_metric(name)
    qrels = _qrels(col)
    out = []
    for q in range(col.n_queries):
        judged = qrels.get(q, {})
        docs = _ordered(col, q, use_rank=use_rank)
        grades = [judged.get(d, 0) for d in docs]
        big_r = sum(g >= level for g in judged.values())
        rel = [g >= level for g in grades]
        k = spec.k if spec.k is not None else len(docs)

        def g_of(x: float) -> float:
            return x if gain == "linear" else 2.0**x - 1.0

        def dcg(gs: list[int] | list[float], cut: int) -> float:
            return sum(g_of(g) / math.log2(i + 2) for i, g in enumerate(gs[:cut]))

        if spec.kind in ("ndcg", "ndcg_cond"):
            if spec.kind == "ndcg_cond":
                grades = [judged[d] for d in docs if d in judged]
            cut = spec.k if spec.k is not None else max(len(grades), len(judged))
            ideal = dcg(sorted(judged.values(), reverse=True), cut)
            out.append(dcg(grades, cut) / ideal if ideal > 0 else math.nan)
            continue
        if spec.kind == "judged":
            top = docs[:k]
            out.append(sum(d in judged for d in top) / len(top) if top else math.nan)
            continue
        if big_r == 0:
            out.append(math.nan)
            continue
        if spec.kind == "p":
            out.append(sum(rel[:k]) / k)
        elif spec.kind == "r":
            out.append(sum(rel[:k]) / big_r)
        elif spec.kind == "rprec":
            out.append(sum(rel[:big_r]) / big_r)
        elif spec.kind == "rr":
            out.append(next((1.0 / (i + 1) for i, r in enumerate(rel) if r), 0.0))
        else:
            hits, total = 0, 0.0
            for i, r in enumerate(rel):
                if r:
                    hits += 1
                    total += hits / (i + 1)
            out.append(total / big_r)
    return out


def _assert_close(ours: np.ndarray, expected: list[float]) -> None:
    expected_arr = np.array(expected, dtype=np.float64)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected_arr))
    np.testing.assert_allclose(ours, expected_arr, rtol=0, atol=TOL, equal_nan=True)


# ------------------------------------------------------------------------- parity tests


@pytest.mark.parametrize("use_rank", [False, True])
@given(col=collections(), level=st.integers(1, 2))
def test_against_trec_eval(col: Collection, level: int, use_rank: bool) -> None:
    res = _ours(col, ALL, use_rank=use_rank, relevant_grade=level)
    trec = _trec(col, level, use_rank=use_rank)
    qrels = _qrels(col)
    for name in ALL:
        ours = res.metrics[name]
        for q in range(col.n_queries):
            value = float(ours[q])
            if str(q) in trec:
                expected = trec[str(q)][TREC[name]]
                if math.isnan(value):
                    assert expected == 0.0, (name, q)  # R = 0 (nDCG: ideal DCG = 0)
                else:
                    assert abs(value - expected) <= TOL, (name, q, value, expected)
            elif res.returned[q] == 0:  # only in the judgments, or nowhere
                if name.startswith("ndcg"):
                    positive = any(g > 0 for g in qrels.get(q, {}).values())
                    assert (value == 0.0) if positive else math.isnan(value)
                else:
                    assert (value == 0.0) if res.relevant[q] > 0 else math.isnan(value)
            else:  # results but no judgment at all: trec_eval skips the query
                assert q not in qrels
                assert math.isnan(value)


@pytest.mark.parametrize("use_rank", [False, True])
@pytest.mark.parametrize("gain", ["linear", "exponential"])
@given(col=collections(), level=st.sampled_from([1.0, 1.5, 2.0]))
def test_against_reference(col: Collection, level: float, gain: str, use_rank: bool) -> None:
    res = _ours(col, ALL_OURS, use_rank=use_rank, relevant_grade=level, gain=gain)
    for name in ALL_OURS:
        expected = _reference(col, name, level, gain, use_rank=use_rank)
        _assert_close(res.metrics[name], expected)
    qrels = _qrels(col)
    docs = [_ordered(col, q, use_rank=use_rank) for q in range(col.n_queries)]
    assert res.returned.tolist() == [len(d) for d in docs]
    assert res.duplicates == len(col.run_query) - sum(len(d) for d in docs)
    relevant = [sum(g >= level for g in qrels.get(q, {}).values()) for q in range(col.n_queries)]
    assert res.relevant.tolist() == relevant
    assert res.defined.tolist() == [r > 0 for r in relevant]


@given(col=collections())
def test_condensed_ndcg_is_trec_ndcg_without_unjudged(col: Collection) -> None:
    res = _ours(col, ["ndcg'@10", "ndcg'@3", "ndcg'"], use_rank=False)
    trec = _trec(col, 1, use_rank=False, drop_unjudged=True)
    for name, measure in (
        ("ndcg'@10", "ndcg_cut_10"),
        ("ndcg'@3", "ndcg_cut_3"),
        ("ndcg'", "ndcg"),
    ):
        for q, value in enumerate(res.metrics[name]):
            if str(q) in trec and not math.isnan(value):
                assert abs(value - trec[str(q)][measure]) <= TOL


@given(col=collections())
def test_unpacked_sort_path_agrees(col: Collection) -> None:
    """With a tiny packing limit every sort takes the dense re-ranking fallback."""
    expected = _ours(col, ALL_OURS, use_rank=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ranking, "_PACK_LIMIT", 8)
        got = _ours(col, ALL_OURS, use_rank=True)
    for name in ALL_OURS:
        np.testing.assert_array_equal(got.metrics[name], expected.metrics[name])


def test_sparse_document_codes_are_renumbered() -> None:
    big = 1 << 60
    res = rm([0, 0, 0], [big, 5, big + 7], [0, 0], [big + 7, 5], [1, 2], n_queries=1,
             metrics=["rr", "ap"], score=[3.0, 2.0, 1.0])  # fmt: skip
    assert res.metrics["rr"][0] == 0.5
    assert res.metrics["ap"][0] == pytest.approx((1 / 2 + 2 / 3) / 2, abs=TOL)


# ------------------------------------------------------------------------- worked example


def test_worked_example() -> None:
    """Two queries, grades 0-2, relevant = grade >= 1.

    Query 0 run (by score): d4 (grade 2), d1 (unjudged), d2 (grade 0), d3 (grade 1); judged also
    d5 (grade 1, not retrieved), so R = 3 and the ideal grades are 2, 1, 1, 0.
      nDCG@3 = (2/log2 2) / (2 + 1/log2 3 + 1/log2 4) = 2 / 3.130930 = 0.638788
      AP = (1/1 + 2/4) / 3 = 0.5; RR = 1; P@3 = 1/3; R@3 = 1/3; R-prec = P@3 = 1/3
      judged@3 = 2/3 (d1 unjudged); nDCG'@3 on d4, d2, d3 = (2 + 0 + 1/2) / 3.130930 = 0.798485
    Query 1 run: d2 at rank 1 and again at rank 3 (a duplicate, dropped), d6; d6 has grade 1.
      R = 1; RR = 1/2; AP = 1/2; P@3 = 1/3; nDCG@3 = (1/log2 3) / 1 = 0.630930.
    """
    res = rm(
        run_query=[0, 0, 0, 0, 1, 1, 1],
        run_doc=[4, 1, 2, 3, 2, 2, 6],
        judged_query=[0, 0, 0, 0, 1],
        judged_doc=[4, 2, 3, 5, 6],
        grade=[2, 0, 1, 1, 1],
        n_queries=2,
        metrics=["ndcg@3", "ap", "rr", "p@3", "r@3", "rprec", "judged@3", "ndcg'@3"],
        rank=[1, 2, 3, 4, 1, 3, 2],
    )
    ideal = 2 + 1 / math.log2(3) + 1 / 2
    expected = {
        "ndcg@3": [2 / ideal, 1 / math.log2(3)],
        "ap": [0.5, 0.5],
        "rr": [1.0, 0.5],
        "p@3": [1 / 3, 1 / 3],
        "r@3": [1 / 3, 1.0],
        "rprec": [1 / 3, 0.0],
        "judged@3": [2 / 3, 1 / 2],
        "ndcg'@3": [2.5 / ideal, 1.0],
    }
    for name, values in expected.items():
        np.testing.assert_allclose(res.metrics[name], values, rtol=0, atol=TOL, err_msg=name)
    assert round(float(res.metrics["ndcg@3"][0]), 6) == 0.638788
    assert round(float(res.metrics["ndcg'@3"][0]), 6) == 0.798485
    assert res.relevant.tolist() == [3, 1]
    assert res.returned.tolist() == [4, 2]
    assert res.duplicates == 1
    assert res.defined.tolist() == [True, True]


def test_queries_without_results_or_relevant_judgments() -> None:
    # query 0: results, no relevant judgment; 1: only judged; 2: nothing at all
    res = rm([0, 0], [1, 2], [0, 1], [1, 3], [0, 2], n_queries=3,
             metrics=["ndcg@10", "ap", "p@10", "judged@10"], score=[1.0, 0.5])  # fmt: skip
    assert np.isnan(res.metrics["ap"][[0, 2]]).all()
    assert res.metrics["ap"][1] == 0.0
    assert res.metrics["ndcg@10"][1] == 0.0
    assert res.metrics["p@10"][1] == 0.0
    assert res.metrics["judged@10"].tolist()[0] == 0.5
    assert np.isnan(res.metrics["judged@10"][[1, 2]]).all()
    assert res.returned.tolist() == [2, 0, 0]
    assert res.defined.tolist() == [False, True, False]


def test_empty_inputs() -> None:
    res = rm([], [], [], [], [], n_queries=0, metrics=["ap"], score=[])
    assert res.metrics["ap"].shape == (0,)
    res = rm([], [], [], [], [], n_queries=2, metrics=["ap", "judged@5"], rank=[])
    assert np.isnan(res.metrics["ap"]).all()
    assert np.isnan(res.metrics["judged@5"]).all()


def test_conflicting_judgments() -> None:
    with pytest.raises(ConflictingJudgmentsError) as info:
        rm([0], [1], [0, 3, 3, 3], [1, 17, 17, 4], [1, 2, 1, 0], n_queries=4,
           metrics=["ap"], score=[1.0])  # fmt: skip
    err = info.value
    assert (err.query, err.doc, err.grades) == (3, 17, (1.0, 2.0))
    assert str(err) == "query 3, document 17 is judged twice with different grades (1 and 2)."
    assert isinstance(err, StatsInputError)


# ------------------------------------------------------------------------- names and validation


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("nDCG@10", MetricSpec("ndcg@10", "ndcg", 10)),
        ("ndcg", MetricSpec("ndcg", "ndcg", None)),
        ("NDCG'@5", MetricSpec("ndcg'@5", "ndcg_cond", 5)),
        ("ndcg'", MetricSpec("ndcg'", "ndcg_cond", None)),
        ("MAP", MetricSpec("ap", "ap", None)),
        ("ap", MetricSpec("ap", "ap", None)),
        ("Rprec", MetricSpec("rprec", "rprec", None)),
        ("mrr", MetricSpec("rr", "rr", None)),
        (" rr ", MetricSpec("rr", "rr", None)),
        ("P@10", MetricSpec("p@10", "p", 10)),
        ("r@100", MetricSpec("r@100", "r", 100)),
        ("judged@10", MetricSpec("judged@10", "judged", 10)),
    ],
)
def test_parse_metric(name: str, spec: MetricSpec) -> None:
    assert parse_metric(name) == spec


@pytest.mark.parametrize("name", ["p", "judged", "r", "ap@10", "rr@1", "p@0", "ndcg@", "bpref", ""])
def test_parse_metric_iv(name: str) -> None:
    with pytest.raises(StatsInputError, match=r"`name` must be a metric name, one of ndcg@K"):
        parse_metric(name)


def test_aliases_give_one_key() -> None:
    res = rm([0], [0], [0], [0], [1], n_queries=1, metrics=["map", "AP", "MRR"], score=[1.0])
    assert sorted(res.metrics) == ["ap", "rr"]


GOOD: dict[str, Any] = {
    "run_query": [0, 1],
    "run_doc": [0, 1],
    "judged_query": [0],
    "judged_doc": [1],
    "grade": [1.0],
    "n_queries": 2,
    "metrics": ["ap"],
    "score": [1.0, 2.0],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n_queries": -1}, "`n_queries` must be an integer >= 0; got -1."),
        ({"n_queries": 1.5}, "`n_queries` must be an integer >= 0; got 1.5."),
        ({"metrics": "ap"}, "`metrics` must be a sequence of metric names (a list, not one"),
        ({"metrics": ["ap", "bpref"]}, "`metrics[1]` must be a metric name, one of ndcg@K"),
        ({"metrics": [3]}, "`metrics[0]` must be a metric name, one of ndcg@K, ndcg, ndcg'@K"),
        ({"gain": "log"}, "`gain` must be one of {'linear', 'exponential'}; got 'log'."),
        ({"relevant_grade": 0}, "`relevant_grade` must be a finite number in (0, inf]; got 0."),
        ({"run_query": [0, 2]}, "`run_query` codes must be in [0, 2) (`n_queries` = 2); got 2 at"),
        ({"run_query": [0, -1]}, "`run_query` codes must be in [0, 2) (`n_queries` = 2); got -1"),
        ({"run_query": [0.0, 1.0]}, "`run_query` must be an array of integer codes; got dtype"),
        ({"run_query": [[0, 1]]}, "`run_query` must be 1-D; got an array of shape (1, 2)."),
        ({"run_doc": [0, -4]}, "`run_doc` codes must be >= 0; got -4 at row 1."),
        ({"run_doc": [0]}, "`run_doc` must have the same length as `run_query` (one per run row)"),
        ({"judged_query": [5]}, "`judged_query` codes must be in [0, 2) (`n_queries` = 2); got 5"),
        ({"judged_doc": ["a"]}, "`judged_doc` must be an array of integer codes; got dtype <U1."),
        ({"judged_doc": [1, 2]}, "`judged_doc` must have the same length as `judged_query` (one"),
        ({"grade": [1.0, 2.0]}, "`grade` must have the same length as `judged_query` (one per"),
        ({"grade": [-1.0]}, "`grade` must be >= 0; got -1 at row 0."),
        ({"grade": [math.nan]}, "`grade` must not contain NaN or infinite values; got 1 of 1."),
        ({"score": None}, "at least one of `rank` and `score` is required to order the run."),
        ({"score": [1.0, math.inf]}, "`score` must not contain NaN or infinite values; got 1 of"),
        ({"score": [1.0]}, "`score` must have the same length as `run_query` (one per run row)"),
        ({"rank": [1, 2, 3]}, "`rank` must have the same length as `run_query` (one per run row)"),
        ({"rank": ["x", "y"]}, "`rank` must be a 1-D array of numbers; got ['x', 'y']."),
    ],
)
def test_ranking_metrics_iv(change: dict[str, Any], message: str) -> None:
    kwargs = {**GOOD, **change}
    with pytest.raises(StatsInputError) as info:
        rm(**kwargs)
    assert str(info.value).startswith(message), str(info.value)


def test_large_integral_scores_are_sorted_not_shifted() -> None:
    res = rm([0, 0, 0], [0, 1, 2], [0], [2], [1], n_queries=1, metrics=["rr"],
             score=[1e300, -1e300, 2.0**60])  # fmt: skip
    assert res.metrics["rr"][0] == 0.5
