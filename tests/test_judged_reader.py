"""The judged-runs reader (``monitor.sources.ranked``) against ``ranking_metrics`` (issue 12).

``ranking_metrics`` codes documents in string order and sorts every run row; it is checked
against pytrec_eval in ``tests/stats/test_ranking.py``. The reader instead places lists on
the ids' bytes and joins by fingerprint, confirming each match on the bytes. Random runs
written to parquet (ties in rank and score, duplicate documents, unjudged documents and
queries, ids of several lengths including ones longer than 8 bytes, rows in any order) must
give the same per-query values for every metric; and with a fingerprint that collides on
purpose (every id of one length gets the same one) the values must not change, since every
match is confirmed on the bytes.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.errors import BadValuesError, SchemaError
from monitor.judged import judged_outcomes
from monitor.sources import (
    JudgedSpec,
    OutcomeSpec,
    Window,
    clear_cache,
    ranked,
    read_judged_runs,
    write_parquet,
)
from monitor.sources import judgments as judged_source
from monitor.stats import ranking_metrics

T0 = datetime(2026, 11, 2, 2, tzinfo=UTC)
METRICS = ("ndcg@5", "ap", "rr", "p@3", "r@10", "rprec", "judged@5", "ndcg'@5", "ndcg")
# ids of different lengths: short, exactly 8 bytes, longer than one word, multi-byte UTF-8
DOCS = ["d1", "d2", "d10", "doc-0008", "doc-00009", "a-long-document-id-17", "dé", "d"]
# ids sharing their first 8 bytes (one word) with "doc-00009", one of the same length
DOCS += ["doc-00009b", "doc-0000999", "doc-00008"]


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, object]:
    n_q = draw(st.integers(1, 5))
    queries = [f"q{i}" for i in range(n_q)]
    judged_rows = []
    for q in queries:
        if draw(st.booleans()) or q == "q0":  # q0 always judged: at least one defined query
            docs = draw(st.lists(st.sampled_from(DOCS), min_size=1, max_size=6, unique=True))
            for d in docs:
                judged_rows.append((q, d, float(draw(st.integers(0, 3)))))
    run_rows = []
    for q in [*queries, "q-unjudged"]:
        docs = draw(st.lists(st.sampled_from(DOCS), min_size=0, max_size=9))  # duplicates
        for i, d in enumerate(docs):
            rank = float(draw(st.sampled_from([i + 1, i + 1, 1, 2])))  # mostly distinct, ties
            score = float(draw(st.sampled_from([0.5, 0.25, 0.125, float(-i)])))
            run_rows.append((q, d, rank, score))
    order = draw(st.permutations(range(len(run_rows)))) if draw(st.booleans()) else None
    if order is not None:
        run_rows = [run_rows[i] for i in order]
    return {
        "judged": judged_rows,
        "run": run_rows,
        "ordering": draw(st.sampled_from(["rank", "score", "both"])),
    }


def _expected(world: dict[str, object]) -> dict[str, dict[str, float]]:
    judged = world["judged"]
    run = world["run"]
    assert isinstance(judged, list)
    assert isinstance(run, list)
    names = sorted({q for q, *_ in judged} | {q for q, *_ in run})
    vocab = sorted({d for _, d, *_ in judged} | {d for _, d, *_ in run}, key=str.encode)
    qc = {q: i for i, q in enumerate(names)}
    dc = {d: i for i, d in enumerate(vocab)}
    ordering = world["ordering"]
    r = ranking_metrics(
        [qc[q] for q, *_ in run],
        [dc[d] for _, d, *_ in run],
        [qc[q] for q, *_ in judged],
        [dc[d] for _, d, *_ in judged],
        [g for *_, g in judged],
        n_queries=len(names),
        metrics=list(METRICS),
        rank=None if ordering == "score" else [x[2] for x in run],
        score=None if ordering == "rank" else [x[3] for x in run],
    )
    return {
        q: {m: float(r.metrics[m][i]) for m in r.metrics}
        for i, q in enumerate(names)
        if r.defined[i] and r.returned[i] > 0
    }


def _ours(world: dict[str, object], root: Path) -> dict[str, dict[str, float]]:
    judged = world["judged"]
    run = world["run"]
    assert isinstance(judged, list)
    assert isinstance(run, list)
    write_parquet(
        root / "qrels" / "qrels.parquet",
        {
            "query_id": np.array([q for q, *_ in judged], dtype=np.str_),
            "doc_id": np.array([d for _, d, _ in judged], dtype=np.str_),
            "grade": np.array([g for *_, g in judged], dtype=np.float64),
        },
    )
    ordering = world["ordering"]
    columns: dict[str, np.ndarray] = {
        "timestamp": np.full(len(run), np.datetime64(T0.replace(tzinfo=None), "us")),
        "query_id": np.array([x[0] for x in run], dtype=np.str_),
        "doc_id": np.array([x[1] for x in run], dtype=np.str_),
    }
    if ordering != "score":
        columns["rank"] = np.array([x[2] for x in run], dtype=np.float64)
    if ordering != "rank":
        columns["score"] = np.array([x[3] for x in run], dtype=np.float64)
    write_parquet(root / "runs" / "run.parquet", columns)
    clear_cache()
    spec = OutcomeSpec(
        path=str(root / "runs"),
        judged=JudgedSpec(judgments=str(root / "qrels"), metric=METRICS[0], report=METRICS[1:]),
    )
    w = judged_outcomes(spec, Window(start=T0, end=T0 + timedelta(hours=1)))
    values = {METRICS[0]: w.outcomes, **w.extras}
    return {str(q): {m: float(values[m][i]) for m in METRICS} for i, q in enumerate(w.query_ids)}


def _same(ours: dict[str, dict[str, float]], expected: dict[str, dict[str, float]]) -> None:
    assert ours.keys() == expected.keys()
    for q, metrics in expected.items():
        for m, value in metrics.items():
            got = ours[q][m]
            assert (np.isnan(got) and np.isnan(value)) or got == pytest.approx(value, abs=1e-12), (
                q,
                m,
                got,
                value,
            )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_reader_equals_ranking_metrics(world: dict[str, object]) -> None:
    if not any(q == "q0" for q, *_ in world["run"]):  # type: ignore[attr-defined]
        world["run"].append(("q0", "d1", 1.0, 1.0))  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:
        _same(_ours(world, Path(tmp)), _expected(world))


def _colliding(words: np.ndarray, length: np.ndarray, more: np.ndarray | None = None) -> np.ndarray:
    """Every id of one length gets one fingerprint: keys collide inside every query."""
    return (length.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).astype(np.uint64)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_fingerprint_collisions_change_nothing(world: dict[str, object]) -> None:
    if not any(q == "q0" for q, *_ in world["run"]):  # type: ignore[attr-defined]
        world["run"].append(("q0", "d1", 1.0, 1.0))  # type: ignore[attr-defined]
    expected = _expected(world)
    judged_source._JUDGMENTS.clear()
    original = ranked.fingerprint
    ranked.fingerprint = _colliding
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _same(_ours(world, Path(tmp)), expected)
    finally:
        ranked.fingerprint = original
        judged_source._JUDGMENTS.clear()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds())
def test_ids_past_the_words_kept_change_nothing(world: dict[str, object]) -> None:
    """Ids longer than the words kept (a batch keeps the words of all but its longest 1 %, at
    least 8: one 4 KB URL once widened 200k ids' words to 800 MB) are matched, de-duplicated
    and ordered on their whole bytes: with one word kept and every longer id "long", every
    metric is still ranking_metrics'."""
    if not any(q == "q0" for q, *_ in world["run"]):  # type: ignore[attr-defined]
        world["run"].append(("q0", "d1", 1.0, 1.0))  # type: ignore[attr-defined]
    expected = _expected(world)
    judged_source._JUDGMENTS.clear()
    words, share, original = ranked.WORDS, ranked.LONG_SHARE, ranked.fingerprint
    ranked.WORDS, ranked.LONG_SHARE = 1, 0.99
    # every id of one length one fingerprint: matches are confirmed on the bytes past a word
    ranked.fingerprint = _colliding
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _same(_ours(world, Path(tmp)), expected)
    finally:
        ranked.WORDS, ranked.LONG_SHARE, ranked.fingerprint = words, share, original
        judged_source._JUDGMENTS.clear()


def test_ties_between_ids_past_the_words_kept_are_broken_on_their_whole_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ids the same in their words kept and in length, tied in score with 150 short ids
    (so that the tied rows' words are those of the short ones and these two are long):
    trec_eval's order, document id descending, needs their whole bytes. Descending, the
    short "s..." ids come first, then "doc-00009", then the relevant "doc-00008" (152nd)."""
    monkeypatch.setattr(ranked, "WORDS", 1)
    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    (tmp_path / "qrels.txt").write_text("q1 0 doc-00008 1\nq1 0 doc-00009 0\n")
    (tmp_path / "runs").mkdir()
    lines = ["q1 Q0 doc-00008 0 1.5 t", "q1 Q0 doc-00009 0 1.5 t"]
    lines += [f"q1 Q0 s{i} 0 1.5 t" for i in range(150)]
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text("\n".join(lines) + "\n")
    clear_cache()
    judged = JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric="rr")
    out = judged_outcomes(OutcomeSpec(path=str(tmp_path / "runs"), judged=judged), window)
    assert out.outcomes.tolist() == [pytest.approx(1 / 152)]


def test_long_ids_are_kept_whole_beside_the_words_of_the_rest() -> None:
    """One long id among short ones: the words stay those of the short ids (8, the least),
    the long id's bytes are kept whole, and its fingerprint is that of all its words."""
    import pyarrow as pa

    ids = [f"doc-{i}" for i in range(300)] + ["https://example.org/" + "x" * 4000]
    keys = ranked.id_keys(pa.array(ids))
    assert keys.words.shape == (ranked.WORDS, len(ids))
    assert list(keys.long) == [300]
    raw = ids[-1].encode()
    full = np.frombuffer(raw + bytes(-len(raw) % 8), dtype="<u8").astype(np.uint64)[:, None]
    assert keys.fp[300] == ranked.fingerprint(full, np.array([len(raw)]))[0]
    assert keys.raw(300) == raw
    prefix = ids[-1][:-1] + "y"  # the same first 4,000 bytes and length, one byte apart
    other = ranked.id_keys(pa.array([prefix, ids[-1]]))
    assert list(keys.equal(np.array([300, 300]), other, np.array([0, 1]))) == [False, True]


def test_collisions_are_exercised() -> None:
    """The colliding fingerprint does collide: the judgments index marks ambiguous keys."""
    keys = ranked.id_keys(__import__("pyarrow").array(["d1", "d2", "d3"]))
    colliding = ranked.IdKeys(keys.words, keys.length, _colliding(keys.words, keys.length))
    index = ranked.index_judgments(
        np.zeros(3, dtype=np.int64), colliding, np.array([1.0, 2.0, 0.0]), 1
    )
    assert isinstance(index, ranked.JudgmentIndex)
    assert len(index.ambiguous) == 1
    assert index.key.size == 3
    codes = ranked.join(index, np.zeros(3, dtype=np.int64), colliding.take(np.array([2, 0, 1])))
    assert list(index.grades(codes)) == [0.0, 1.0, 2.0]


def test_window_means_weigh_each_query_once(tmp_path: Path) -> None:
    """``JudgedInfo.means``: each metric's mean over the window's queries. q1 is evaluated in
    two runs (AP 1 in each), q2 in one (AP 0): every metric's window mean is 0.5, as the
    decision metric's is (a mean over the lists gave AP 2/3, as if q1 were two queries)."""
    t0 = datetime(2026, 3, 2, 2, tzinfo=UTC)
    naive = np.datetime64(t0.replace(tzinfo=None), "us")
    when = np.array([naive, naive, naive + np.timedelta64(1, "D")])
    write_parquet(
        tmp_path / "runs" / "p.parquet",
        {
            "timestamp": when,
            "query_id": np.array(["q1", "q2", "q1"]),
            "doc_id": np.array(["a", "x", "a"]),
            "rank": np.array([1, 1, 1]),
        },
    )
    write_parquet(
        tmp_path / "qrels.parquet",
        {
            "query_id": np.array(["q1", "q2", "q2"]),
            "doc_id": np.array(["a", "x", "y"]),
            "grade": np.array([1.0, 0.0, 1.0]),
        },
    )
    spec = OutcomeSpec(
        path=str(tmp_path / "runs"),
        judged=JudgedSpec(
            judgments=str(tmp_path / "qrels.parquet"), metric="ndcg@10", report=("ap", "p@1")
        ),
    )
    w = judged_outcomes(spec, Window(start=t0, end=t0 + timedelta(days=2)))
    assert w.judged is not None
    assert w.judged.lists == 3
    np.testing.assert_array_equal(w.outcomes, [1.0, 0.0])
    assert w.judged.means == {"ndcg@10": 0.5, "ap": 0.5, "p@1": 0.5, "judged@10": 1.0}
    for name, per_query in w.extras.items():
        assert w.judged.means[name] == float(np.nanmean(per_query))


def test_a_null_segment_partition_of_runs_is_null_segments(tmp_path: Path) -> None:
    """Runs partitioned by segment, one partition Hive's null (``__HIVE_DEFAULT_PARTITION__``):
    its rows are dropped and counted as null segments are, as the score and outcome readers do
    (the judged reader once made it a segment of that name)."""
    from monitor.errors import BadValuesError

    t0 = datetime(2026, 3, 2, 2, tzinfo=UTC)
    naive = np.datetime64(t0.replace(tzinfo=None), "us")
    for market in ("us", "__HIVE_DEFAULT_PARTITION__"):
        write_parquet(
            tmp_path / "runs" / f"market={market}" / "p.parquet",
            {
                "timestamp": np.array([naive, naive]),
                "query_id": np.array(["q1", "q2"]),
                "doc_id": np.array(["a", "x"]),
                "rank": np.array([1, 1]),
            },
        )
    write_parquet(
        tmp_path / "qrels.parquet",
        {"query_id": np.array(["q1", "q2"]), "doc_id": np.array(["a", "x"]), "grade": np.ones(2)},
    )
    window = Window(start=t0, end=t0 + timedelta(days=1))

    def spec(share: float) -> OutcomeSpec:
        judged = JudgedSpec(judgments=str(tmp_path / "qrels.parquet"), metric="ndcg@10")
        return OutcomeSpec(
            path=str(tmp_path / "runs"),
            segment_column="market",
            judged=judged,
            max_invalid_share=share,
        )

    with pytest.raises(BadValuesError, match="2 of 4"):
        judged_outcomes(spec(0.01), window)
    w = judged_outcomes(spec(0.5), window)
    assert w.segments is not None
    assert set(w.segments.tolist()) == {"us"}
    assert w.outcomes.size == 2


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([1e20, 1e20, 1e20], ["c", "b", "a"]),  # a tie: document id descending
        ([2e20, 3e20, 1e20], ["b", "a", "c"]),
        ([-1e19, 5e19, 0.0], ["b", "c", "a"]),
        ([2.0**53, 2.0**53 + 2, 2.0**53 - 1], ["b", "a", "c"]),
    ],
)
def test_integer_valued_scores_beyond_int64_are_placed(
    scores: list[float], expected: list[str]
) -> None:
    """Integer-valued scores are coded as int64 when they span little; at 1e20 the cast
    overflowed (OverflowError: a check in error). They now take the general path."""
    import pyarrow as pa

    ids = pa.array(["a", "b", "c"])
    docs = ranked.RowIds(ranked.id_keys(ids).fp, pa.chunked_array([ids]))
    order = ranked.placement(np.zeros(3, dtype=np.int64), 1, None, np.array(scores), docs)
    placed = list(range(3)) if order is None else order.tolist()
    assert [ids[i].as_py() for i in placed] == expected


def test_monitors_grading_from_other_columns_of_one_file_get_their_own(tmp_path: Path) -> None:
    """Two monitors read one judgments file with different grade columns: each gets its own
    grades, whichever reads first. The coded judgments were once cached by the files alone,
    so the second monitor silently scored against the first one's grades."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text(
        "q1 Q0 a 1 3.0 t\nq1 Q0 b 2 2.0 t\n"
    )
    write_parquet(
        tmp_path / "qrels.parquet",
        {
            "query_id": np.array(["q1", "q1"]),
            "doc_id": np.array(["a", "b"]),
            "editorial": np.array([1.0, 0.0]),
            "llm": np.array([0.0, 1.0]),
        },
    )
    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    expected = {"editorial": 1.0, "llm": 0.5}  # RR: a is first, b second
    for order in (["editorial", "llm"], ["llm", "editorial"]):
        clear_cache()
        for column in order:
            judged = JudgedSpec(
                judgments=str(tmp_path / "qrels.parquet"), grade_column=column, metric="rr"
            )
            spec = OutcomeSpec(path=str(tmp_path / "runs"), judged=judged)
            got = judged_outcomes(spec, window).outcomes
            assert got.tolist() == [expected[column]], (order, column)


def test_an_empty_or_mixed_judgments_version_is_refused(tmp_path: Path) -> None:
    """A judgment file still being copied is 0 bytes: it was read as an empty TREC qrels
    file, so the check graded both windows on the other files' half of the judgments and
    said ok. Empty text and parquet mixed with text are refused, naming the file."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text(
        "q1 Q0 a 1 3.0 t\nq2 Q0 b 1 2.0 t\n"
    )
    qrels = tmp_path / "qrels"
    write_parquet(
        qrels / "part-0.parquet",
        {"query_id": np.array(["q1"]), "doc_id": np.array(["a"]), "grade": np.array([1.0])},
    )
    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    spec = OutcomeSpec(path=str(tmp_path / "runs"), judged=JudgedSpec(judgments=str(qrels)))
    clear_cache()
    assert judged_outcomes(spec, window).outcomes.tolist() == [1.0]  # one file: read (q1)
    (qrels / "more.qrels").write_text("q2 0 b 1\n")
    clear_cache()
    with pytest.raises(SchemaError, match="mixes parquet and text files") as info:
        judged_outcomes(spec, window)
    assert str(qrels) in str(info.value)
    (qrels / "more.qrels").unlink()
    (qrels / "part-1.parquet").write_bytes(b"")  # created, not yet written
    clear_cache()
    with pytest.raises(SchemaError, match="holds no judgment lines") as info:
        judged_outcomes(spec, window)
    assert "part-1.parquet" in str(info.value)


def test_validate_sources_finds_a_runs_directory_that_mixes_kinds(tmp_path: Path) -> None:
    """A judged-runs directory with TREC run files and one parquet run: every check refuses
    it ("mixes parquet and text files"), but `validate --sources` skipped the text files and
    passed it. It reports the same problem now."""
    from monitor.sources import inspect_source

    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "run-2026-03-02T020000Z.trec").write_text("q1 Q0 a 1 3.0 t\n")
    qrels = tmp_path / "qrels"
    write_parquet(
        qrels / "part-0.parquet",
        {"query_id": np.array(["q1"]), "doc_id": np.array(["a"]), "grade": np.array([1.0])},
    )
    spec = OutcomeSpec(path=str(runs), judged=JudgedSpec(judgments=str(qrels)))
    clear_cache()
    assert inspect_source(spec).ok
    write_parquet(
        runs / "run-2026-03-03T020000Z.parquet",
        {
            "timestamp": np.array(["2026-03-03T02:00:00"], dtype="datetime64[us]"),
            "query_id": np.array(["q1"]),
            "doc_id": np.array(["a"]),
            "rank": np.array([1]),
        },
    )
    clear_cache()
    report = inspect_source(spec)
    assert any("mixes parquet and text files" in p for p in report.problems), report.problems


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 1, 0, 2), (2, 3, 1, 0)])
def test_infinite_scores_are_placed_as_trec_eval_places_them(
    tmp_path: Path, order: tuple[int, ...]
) -> None:
    """A score of +inf is first and -inf last, whatever the order of the lines (ranks all 0,
    so the score places): an infinite score was once a missing one on the sorting path (last)
    and a value on the sorted rows' fast path (first)."""
    import pytrec_eval

    lines = ["q1 Q0 a 0 2.0 t", "q1 Q0 rel 0 inf t", "q1 Q0 b 0 1.0 t", "q1 Q0 c 0 -inf t"]
    (tmp_path / "runs").mkdir()
    text = "\n".join(lines[i] for i in order) + "\n"
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text(text)
    (tmp_path / "qrels.txt").write_text("q1 0 rel 1\nq1 0 a 0\nq1 0 c 1\n")
    clear_cache()
    got = {}
    for metric, name in (("rr", "recip_rank"), ("ap", "map")):
        judged = JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric=metric)
        spec = OutcomeSpec(path=str(tmp_path / "runs"), judged=judged)
        window = Window(
            start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC)
        )
        got[name] = float(judged_outcomes(spec, window).outcomes[0])
    run = {"q1": {"rel": float("inf"), "a": 2.0, "b": 1.0, "c": float("-inf")}}
    qrels = {"q1": {"rel": 1, "a": 0, "c": 1}}
    want = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank", "map"}).evaluate(run)["q1"]
    assert got == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize(
    "docs", [("a", "b", "c"), ("c", "b", "a"), ("b", "a", "c"), ("a", "c", "b", "d")]
)
def test_tied_scores_are_placed_by_docno_descending_in_any_line_order(
    tmp_path: Path, docs: tuple[str, ...]
) -> None:
    """Equal ranks and tied scores: trec_eval places by docno descending whatever the order of
    the lines; lines already in ascending docno order once could take the sorted rows' fast
    path untested (a mutation of its tie rule passed every test: RR 1.0 for 1/3)."""
    import pytrec_eval

    (tmp_path / "runs").mkdir()
    text = "".join(f"q1 Q0 {d} 0 1.0 t\n" for d in docs)
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text(text)
    (tmp_path / "qrels.txt").write_text("q1 0 a 1\nq1 0 b 0\n")
    clear_cache()
    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    got = {}
    for metric, name in (("rr", "recip_rank"), ("ndcg@10", "ndcg_cut_10")):
        judged = JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric=metric)
        spec = OutcomeSpec(path=str(tmp_path / "runs"), judged=judged)
        got[name] = float(judged_outcomes(spec, window).outcomes[0])
    run = {"q1": dict.fromkeys(docs, 1.0)}
    evaluator = pytrec_eval.RelevanceEvaluator(
        {"q1": {"a": 1, "b": 0}}, {"recip_rank", "ndcg_cut.10"}
    )
    want = evaluator.evaluate(run)["q1"]
    assert got == pytest.approx(want, abs=1e-12)


def test_trec_runs_for_a_segmented_monitor_are_a_clear_error(tmp_path: Path) -> None:
    """TREC runs have no segment field: a monitor with outcomes.segment_column gets an error
    naming the runs and the column. It once got outcomes beside no segments, and pairing them
    failed with a bare numpy broadcasting error."""
    from monitor.errors import SchemaError

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text(
        "q1 Q0 a 1 3.0 t\nq2 Q0 b 1 2.0 t\n"
    )
    (tmp_path / "qrels.txt").write_text("q1 0 a 1\nq2 0 b 1\n")
    judged = JudgedSpec(judgments=str(tmp_path / "qrels.txt"))
    spec = OutcomeSpec(path=str(tmp_path / "runs"), segment_column="market", judged=judged)
    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    with pytest.raises(SchemaError, match=r"runs: column 'market': trec runs carry no segment"):
        judged_outcomes(spec, window)


def _one_query_runs(
    root: Path, when: list[int], docs: list[str | None], **columns: list[float | None]
) -> OutcomeSpec:
    """Runs of q0 at ``T0 + when`` hours (rows in the given order) and judgments (d1 relevant)
    written to parquet; the outcome spec reading them, scored by RR."""
    naive = np.datetime64(T0.replace(tzinfo=None), "us")
    write_parquet(
        root / "runs" / "r.parquet",
        {
            "timestamp": naive + np.array(when, dtype="timedelta64[h]"),
            "query_id": np.array(["q0"] * len(docs)),
            "doc_id": np.array(docs, dtype=object),
            **{name: np.array(values, dtype=object) for name, values in columns.items()},
        },
    )
    write_parquet(
        root / "qrels" / "q.parquet",
        {"query_id": np.array(["q0"]), "doc_id": np.array(["d1"]), "grade": np.array([1.0])},
    )
    clear_cache()
    return OutcomeSpec(
        path=str(root / "runs"), judged=JudgedSpec(judgments=str(root / "qrels"), metric="rr")
    )


WINDOW = Window(start=T0, end=T0 + timedelta(days=1))


def test_a_null_share_exactly_at_max_invalid_share_is_accepted(tmp_path: Path) -> None:
    """``max_invalid_share`` is the most the window may drop: one null document id in four
    rows (0.25) is accepted at ``max_invalid_share`` 0.25, the row dropped and counted, and
    two in four raise ``BadValuesError``. A share equal to the limit once raised, so a
    monitor configured for its known share of bad rows failed every check."""
    from dataclasses import replace

    from monitor.errors import BadValuesError

    spec = _one_query_runs(tmp_path, [1] * 4, ["d1", "d2", None, "d4"], rank=[1.0, 2.0, 3.0, 4.0])
    runs = read_judged_runs(replace(spec, max_invalid_share=0.25), WINDOW)
    assert (runs.rows, runs.dropped_null) == (4, 1)
    assert runs.row_list.size == 3
    spec = _one_query_runs(tmp_path, [1] * 4, ["d1", None, None, "d4"], rank=[1.0, 2.0, 3.0, 4.0])
    with pytest.raises(
        BadValuesError, match=r"2 of 4 run rows in window .*50.00% > max_invalid_share 25.00%"
    ) as info:
        read_judged_runs(replace(spec, max_invalid_share=0.25), WINDOW)
    # the cause and its column (a null document id was once reported against 'query_id',
    # with four causes lumped together)
    assert info.value.column == "doc_id"
    assert "null document id ('doc_id'): 2" in str(info.value)


def test_a_row_with_a_rank_or_a_score_is_kept(tmp_path: Path) -> None:
    """A row is dropped only when both its rank and its score are null: d1 has a score but no
    rank, d2 a rank but no score, d3 both, d4 neither. Only d4 is dropped (1 of 4, within
    ``max_invalid_share`` 0.5). The two were once required together, which dropped d1 and d2
    as well and failed the read (3 of 4 rows invalid)."""
    from dataclasses import replace

    spec = _one_query_runs(
        tmp_path,
        [1] * 4,
        ["d1", "d2", "d3", "d4"],
        rank=[None, 2.0, 3.0, None],
        score=[0.9, None, 0.1, None],
    )
    runs = read_judged_runs(replace(spec, max_invalid_share=0.5), WINDOW)
    assert (runs.rows, runs.dropped_null) == (4, 1)
    assert runs.row_list.size == 3
    assert runs.list_query.size == 1


def test_two_runs_of_a_query_in_adjacent_rows_are_two_lists(tmp_path: Path) -> None:
    """q0 evaluated at 03:00 (d1, d2) and at 04:00 (d2, d1), the rows written one run after
    the other (a file sorted by query, then time): two lists, no duplicate documents, and RR
    the mean of the two runs' (1 and 1/2) over the one query. Rows of equal query were once
    one list whatever their timestamps: four rows with two duplicates and RR 1."""
    spec = _one_query_runs(
        tmp_path, [1, 1, 2, 2], ["d1", "d2", "d2", "d1"], rank=[1.0, 2.0, 1.0, 2.0]
    )
    runs = read_judged_runs(spec, WINDOW)
    assert runs.list_query.size == 2
    hour = np.int64(3600 * 10**9)
    start = np.int64(int(T0.timestamp()) * 10**9)
    assert runs.list_timestamp.tolist() == [start + hour, start + 2 * hour]
    assert runs.duplicates == 0
    assert runs.row_list.tolist() == [0, 0, 1, 1]
    w = judged_outcomes(spec, WINDOW)
    assert w.outcomes.tolist() == [0.75]
    assert w.counts.tolist() == [2]
    assert w.runs is not None
    assert w.runs.tolist() == [1.0, 0.5]  # the two runs' RR, the decay test's run labels


def test_infinite_scores_in_parquet_runs_are_values_not_invalid_rows(tmp_path: Path) -> None:
    """A parquet run's +inf score is first and -inf last, as in a TREC file and trec_eval:
    they were counted as rows with neither a rank nor a score, dropped (RR 0 instead of 1),
    and above max_invalid_share failed the window."""
    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    (tmp_path / "qrels.txt").write_text("q1 0 rel 1\nq1 0 a 0\nq1 0 c 1\n")
    docs, scores = ["a", "rel", "b", "c"], [2.0, np.inf, 1.0, -np.inf]
    write_parquet(
        tmp_path / "runs" / "r.parquet",
        {
            "timestamp": np.full(4, np.datetime64("2026-03-02T02:00", "us")),
            "query_id": np.array(["q1"] * 4),
            "doc_id": np.array(docs),
            "score": np.array(scores),
        },
    )
    clear_cache()
    judged = JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric="ap")
    spec = OutcomeSpec(path=str(tmp_path / "runs"), judged=judged)  # max_invalid_share 1%
    runs = read_judged_runs(spec, window)
    assert (runs.rows, runs.dropped_null) == (4, 0)
    # rel first, c last: AP = (1/1 + 2/4) / 2
    assert float(judged_outcomes(spec, window).outcomes[0]) == pytest.approx(0.75, abs=1e-12)


def test_a_byte_order_mark_is_not_part_of_a_trec_files_first_query(tmp_path: Path) -> None:
    """Files saved by Windows editors start with U+FEFF: it became part of the first query id,
    a query of its own (the run's first result lost, the first judgment moved)."""
    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    (tmp_path / "qrels.txt").write_text("\ufeffq1 0 rel 1\nq1 0 a 0\n", encoding="utf-8")
    (tmp_path / "runs").mkdir()
    run = "\ufeffq1 Q0 rel 1 2.0 t\nq1 Q0 a 2 1.0 t\n"
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text(run, encoding="utf-8")
    clear_cache()
    judged = JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric="rr")
    out = judged_outcomes(OutcomeSpec(path=str(tmp_path / "runs"), judged=judged), window)
    assert list(out.query_ids) == ["q1"]
    assert out.outcomes.tolist() == [1.0]


@pytest.mark.parametrize("where", ["judgments", "runs", "trec-runs"])
def test_a_query_id_with_a_nul_is_a_clear_error_on_the_judged_path(
    tmp_path: Path, where: str
) -> None:
    """numpy's strings drop a trailing NUL: "q1" and "q1\\0" became one query id, and pairing
    failed with a bare IndexError (or paired the wrong queries). It is refused, naming the
    file, as on the precomputed outcomes' path."""
    from monitor.errors import SchemaError

    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    bad = "q1\x00"
    queries = ["q1", bad if where == "judgments" else "q2"]
    write_parquet(
        tmp_path / "qrels" / "q.parquet",
        {
            "query_id": np.array(queries, dtype=object),
            "doc_id": np.array(["a", "b"]),
            "grade": np.array([1, 1]),
        },
    )
    run_queries = np.array(["q1", bad if where == "runs" else "q2"], dtype=object)
    write_parquet(
        tmp_path / "runs" / "r.parquet",
        {
            "timestamp": np.full(2, np.datetime64("2026-03-02T02:00", "us")),
            "query_id": run_queries,
            "doc_id": np.array(["a", "b"]),
            "score": np.array([1.0, 1.0]),
        },
    )
    runs = tmp_path / "runs"
    if where == "trec-runs":
        runs = tmp_path / "trec"
        runs.mkdir()
        text = f"q1 Q0 a 1 1.0 t\n{bad} Q0 b 1 1.0 t\n"
        (runs / "run-2026-03-02T020000Z.trec").write_text(text)
    clear_cache()
    judged = JudgedSpec(judgments=str(tmp_path / "qrels"), metric="rr")
    with pytest.raises(SchemaError, match="NUL character") as err:
        judged_outcomes(OutcomeSpec(path=str(runs), judged=judged), window)
    assert ("q.parquet" if where == "judgments" else "r") in str(err.value)


def test_a_trec_run_is_read_a_chunk_of_lines_at_a_time(tmp_path: Path) -> None:
    """A TREC run was split into a Python object per field of every line, all held at once
    (about 800 bytes a line: 800 MB for a run of 1M lines); lines are now split a chunk at a
    time and held as Arrow strings and floats. 300k lines: what Python allocates at its peak
    (tracemalloc; Arrow's own buffers are not counted) was 737 bytes a line; the bound is
    200 (about 130 now: the placed lists' keys and codes, and a chunk's objects)."""
    import tracemalloc

    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    queries, depth = 3000, 100
    (tmp_path / "qrels.txt").write_text(
        "".join(f"q{q} 0 d{q}-{k} {k % 3}\n" for q in range(queries) for k in range(0, depth, 7))
    )
    (tmp_path / "runs").mkdir()
    run = "".join(
        f"q{q} Q0 d{q}-{k} {k + 1} {depth - k}.5 bm25\n"
        for q in range(queries)
        for k in range(depth)
    )
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text(run)
    clear_cache()
    judged = JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric="ndcg@10")
    spec = OutcomeSpec(path=str(tmp_path / "runs"), judged=judged)
    tracemalloc.start()
    try:
        out = judged_outcomes(spec, window)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.query_ids.size == queries
    lines = queries * depth
    assert peak < 200 * lines, peak / lines


@pytest.mark.parametrize("conflict", [False, True])
def test_a_long_id_is_matched_across_batches_of_other_widths(
    tmp_path: Path, conflict: bool
) -> None:
    """Judgments in two files whose batches keep other widths (300 short ids and a 100-byte
    target: 8 words, the target kept whole; 300 ids of 120 bytes: 15 words): in the sink the
    target's words past its batch's are zero, and a run batch holding it in full words never
    matched it (RR 0 instead of 1), nor was a second, different grade of it a conflict."""
    from monitor.errors import SchemaError

    target = "https://example.org/docs/" + "t" * 75
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "a.txt").write_text(
        f"q1 0 {target} 1\n" + "".join(f"q1 0 s{i} 0\n" for i in range(300))
    )
    other = "".join(f"q2 0 {'u' * 110}{i:010d} 1\n" for i in range(300))
    if conflict:
        other += f"q1 0 {target} 0\n"
    (tmp_path / "qrels" / "b.txt").write_text(other)
    (tmp_path / "runs").mkdir()
    run = f"q1 Q0 {target} 1 2.0 t\n" + "".join(
        f"q1 Q0 {'o' * 90}{i:010d} {i + 2} {1 - i / 1000} t\n" for i in range(300)
    )
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text(run)
    window = Window(start=datetime(2026, 3, 2, tzinfo=UTC), end=datetime(2026, 3, 3, tzinfo=UTC))
    clear_cache()
    judged = JudgedSpec(judgments=str(tmp_path / "qrels"), metric="rr")
    spec = OutcomeSpec(path=str(tmp_path / "runs"), judged=judged)
    if conflict:
        with pytest.raises(SchemaError, match="judged twice with different grades"):
            judged_outcomes(spec, window)
    else:
        assert judged_outcomes(spec, window).outcomes.tolist() == [1.0]


def test_a_trec_line_with_neither_rank_nor_score_is_dropped_as_a_parquet_row_is(
    tmp_path: Path,
) -> None:
    """``nan nan`` for rank and score on a TREC line was kept (placed last, counted in the
    list), where the same parquet row is dropped and counted: judged@10 0.75 against 1.0 on
    the same data, and ``max_invalid_share`` never applied to TREC runs."""
    rows = [("d9", "nan", "nan"), ("d2", "1", "3"), ("d1", "2", "2"), ("d3", "3", "1")]
    (tmp_path / "qrels.txt").write_text("".join(f"q1 0 d{i} {int(i != 2)}\n" for i in range(1, 6)))
    (tmp_path / "trec").mkdir()
    (tmp_path / "trec" / "run-2026-11-02T020000Z.trec").write_text(
        "".join(f"q1 Q0 {d} {r} {s} t\n" for d, r, s in rows)
    )
    write_parquet(
        tmp_path / "pq" / "run.parquet",
        {
            "timestamp": np.array([np.datetime64(T0.replace(tzinfo=None), "us")] * 4),
            "query_id": np.array(["q1"] * 4),
            "doc_id": np.array([d for d, _, _ in rows]),
            "rank": np.array([float(r) for _, r, _ in rows]),
            "score": np.array([float(s) for _, _, s in rows]),
        },
    )
    window = Window(T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    got = {}
    for kind in ("trec", "pq"):
        clear_cache()
        spec = OutcomeSpec(
            path=str(tmp_path / kind),
            max_invalid_share=1.0,
            judged=JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric="judged@10"),
        )
        w = judged_outcomes(spec, window)
        got[kind] = (w.outcomes.tolist(), w.rows, w.dropped_null)
    assert got["trec"] == got["pq"] == ([1.0], 4, 1)
    clear_cache()
    strict = OutcomeSpec(
        path=str(tmp_path / "trec"),
        max_invalid_share=0.1,
        judged=JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric="judged@10"),
    )
    with pytest.raises(BadValuesError, match=r"run-2026-11-02T020000Z\.trec"):
        judged_outcomes(strict, window)


def test_a_dropped_trec_line_is_still_checked_and_only_its_file_is_named(
    tmp_path: Path,
) -> None:
    """Lines dropped for nan rank and score: their query ids were filtered out before the NUL
    check (a file parquet refuses was accepted), and a file with a nan rank on one line and a
    nan score on another, none with both, was named among the files holding invalid rows."""
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq1 0 d2 1\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "run-2026-11-02T020000Z.trec").write_text("q1 Q0 d1 1 1 t\nq1 Q0 d2 nan nan t\n")
    (runs / "run-2026-11-02T020500Z.trec").write_text("q1 Q0 d1 nan 2 t\nq1 Q0 d2 2 nan t\n")
    window = Window(T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    spec = OutcomeSpec(
        path=str(runs),
        max_invalid_share=0.1,
        judged=JudgedSpec(judgments=str(tmp_path / "qrels.txt"), metric="judged@10"),
    )
    clear_cache()
    with pytest.raises(BadValuesError) as caught:
        judged_outcomes(spec, window)
    assert caught.value.path == str(runs / "run-2026-11-02T020000Z.trec")
    assert "020500Z" not in str(caught.value)
    (runs / "run-2026-11-02T020500Z.trec").unlink()
    (runs / "run-2026-11-02T020000Z.trec").write_text("q1 Q0 d1 1 1 t\nq\0x Q0 d2 nan nan t\n")
    clear_cache()
    with pytest.raises(SchemaError, match="NUL"):
        judged_outcomes(replace(spec, max_invalid_share=1.0), window)
