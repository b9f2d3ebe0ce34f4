"""A real retrieval system for the detection benchmark: BM25 over the standard library's docstrings.

Issue 9 asks for one world built from a real retrieval system. No test collection with judgments
installs offline here, so this script builds a *known-item* collection from text that is on every
machine with Python: the docstrings of a fixed list of standard-library modules (``MODULES``).

Corpus. One document per public function, class or method (a class's own attributes only) whose
docstring has at least two sentences; ``id`` is the qualified name (``json.JSONDecoder.decode``),
the text is the name's tokens followed by the whole docstring. Objects reached twice (re-exports)
and repeated docstrings keep their first id in sorted order, so no two documents are the same
text. Everything is sorted, so the corpus is a function of the Python version (recorded in the
output) and its platform.

Tokens. Runs of ASCII letters and digits, split at snake_case and CamelCase boundaries
(``JSONDecoder`` -> ``json``, ``decoder``), lower-cased, Lucene's English stop words removed.

Retrieval. BM25 with ``k1 = 1.2``, ``b = 0.75`` and Lucene's idf
``log(1 + (N - df + 0.5) / (df + 0.5))``: ``score(q, d) = sum over the distinct terms t of q of
idf(t) tf(t, d) (k1 + 1) / (tf(t, d) + k1 (1 - b + b |d| / avgdl))``, as one sparse matrix
product (scipy.sparse). Ranking: score descending, ties by document id descending (trec_eval's
order); a document that shares no term with the query (score 0) is not retrieved.

Golden set (known-item). A seeded sample of ``GOLDEN_SIZE`` documents; each query is the first
sentence of the document's docstring without the words of the object's own name (its class and
function tokens; the module's stay), and the one relevant document is the source. Outcome per
query: nDCG@10 = 1 / log2(rank + 1) when the source is retrieved in the top 10, else 0 (one
relevant document, so the ideal DCG is 1); RR@10 is reported beside it.

Traffic. The pool of served queries is the first sentences of every other document (same
stripping), plus the golden queries at ``GOLDEN_TRAFFIC_SHARE`` of the traffic. Modules are in two
groups (``NETWORK_MODULES``: concurrency and networking, 23 % of the pool; the rest); the share of
network queries follows a daily cycle, ``NETWORK_SHARE + NETWORK_AMPLITUDE cos(2π (hour - 14) /
24)``. Each hour ``Poisson(SCORES_PER_HOUR (1 + 0.5 cos(2π (hour - 14) / 24)))`` queries are
served at uniform times in the hour and the top-1 BM25 score of each is logged (exact zeros
when nothing matches).

Golden-set runs: once a day from 02:00 UTC, one row per query at uniform times over 15 minutes,
outcome = nDCG@10 under the index in effect at the run's start (the index is deterministic, so
healthy runs give the same numbers every day).

Scenarios (``SCENARIOS``), each month a 38-day world (8-day lead-in, 30 days of hourly checks from
day 8), onset at day 15 13:00 UTC (the worst hour for a daily evaluation: 13 h to the next run):

* ``healthy``: nothing changes (every alarm is false);
* ``titles_only``: the index loses the docstring bodies (documents are their name tokens only):
  scores move at once and nDCG drops at the next run; expected ``model_decay``;
* ``query_mix``: traffic moves to the network modules' queries (share 0.25 -> 0.80, the same
  cycle); golden set and index unchanged; expected ``data_drift`` and never ``model_decay``;
* ``milder``: each body loses a seeded 30 % of its tokens; expected ``model_decay``.

Each month is written as parquet in ``monitor.simulate.write_world``'s layout
(``scores/date=YYYY-MM-DD/part-0.parquet`` with ``timestamp, score``; ``outcomes/...`` with
``timestamp, query_id, outcome``) with ``write_world``'s ``monitor.toml`` (the shipped defaults,
hourly schedule) in a temporary directory, and replayed by ``monitor.backtest.backtest``.

Usage: ``python bench/realworld.py [--months N] [--json PATH]`` (N months per scenario, default 1;
month i starts i days after ``BASE``, with its own traffic seed). The corpus and indexes live in
memory only.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import itertools
import json
import platform
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy import stats

__all__ = [
    "MODULES",
    "SCENARIOS",
    "BM25Index",
    "Corpus",
    "Document",
    "MonthResult",
    "RealScenario",
    "System",
    "build_corpus",
    "build_system",
    "ndcg_at_10",
    "rr_at_10",
    "run_month",
    "summarize",
    "tokenize",
    "write_month",
]

MODULES: tuple[str, ...] = (
    "abc",
    "argparse",
    "array",
    "asyncio",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "collections",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "email",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "html.parser",
    "http.client",
    "inspect",
    "io",
    "itertools",
    "json",
    "logging",
    "math",
    "operator",
    "os",
    "os.path",
    "pathlib",
    "pickle",
    "pprint",
    "queue",
    "random",
    "re",
    "secrets",
    "shutil",
    "socket",
    "sqlite3",
    "ssl",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "traceback",
    "typing",
    "unittest",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "xml.etree.ElementTree",
    "zipfile",
)
#: Concurrency and networking: the traffic group ``query_mix`` moves to.
NETWORK_MODULES = frozenset(
    {"asyncio", "http.client", "queue", "socket", "ssl", "subprocess", "threading"}
)
#: Lucene's English stop words (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``).
STOP_WORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it"}
    | {"no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these"}
    | {"they", "this", "to", "was", "will", "with"}
)
K1 = 1.2
B = 0.75
GOLDEN_SIZE = 300
GOLDEN_SEED = 9
CUTOFF = 10

BASE = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday; month i starts i days later
CHECKS_START = timedelta(days=8)
CHECKS_END = timedelta(days=38)
ONSET = timedelta(days=15, hours=13)
HOUR = timedelta(hours=1)
EVALUATION_HOUR = 2
RUN_LENGTH = timedelta(minutes=15)
SCORES_PER_HOUR = 600.0
VOLUME_AMPLITUDE = 0.5
PEAK_HOUR = 14.0
GOLDEN_TRAFFIC_SHARE = 0.10
NETWORK_SHARE = 0.25
NETWORK_SHARE_AFTER_MIX = 0.80
NETWORK_AMPLITUDE = 0.10
MILDER_DROP = 0.30

Variant = Literal["full", "titles_only", "milder"]
_VARIANTS: tuple[Variant, ...] = ("full", "titles_only", "milder")
_WORD = re.compile(r"[A-Za-z0-9]+")
_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[`'\"*])")
_US_PER_HOUR = 3_600_000_000


# --------------------------------------------------------------------------------------------
# corpus


def tokenize(text: str) -> list[str]:
    """Lower-cased ASCII alphanumeric tokens, split at snake_case and CamelCase, no stop words.

    ``"JSONDecoder.raw_decode(s)"`` -> ``["json", "decoder", "raw", "decode", "s"]``.
    """
    out: list[str] = []
    for word in _WORD.findall(text):
        for part in _PART.findall(word):
            token = part.lower()
            if token not in STOP_WORDS:
                out.append(token)
    return out


def sentences(text: str) -> list[str]:
    """The sentences of ``text``: split at blank lines (paragraphs), then, with whitespace
    collapsed, after ``.!?`` followed by a capital, digit, bracket or quote.

    Pieces without a letter (a lone signature's punctuation) are dropped.
    """
    out: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        flat = " ".join(paragraph.split())
        out += [s for s in _SENTENCE_END.split(flat) if re.search(r"[A-Za-z]", s)]
    return out


@dataclass(frozen=True, slots=True)
class Document:
    """One documented object: ``id`` (qualified name), its ``module`` and token lists.

    ``own_tokens`` are the tokens of the object's own name below the module (class and function),
    removed from its query; ``name_tokens`` those of the whole id (module included).
    """

    id: str
    module: str
    name_tokens: tuple[str, ...]
    own_tokens: frozenset[str]
    body_tokens: tuple[str, ...]
    first_sentence: str

    @property
    def query(self) -> tuple[str, ...]:
        """The known-item query: the first sentence's tokens without the object's own name."""
        return tuple(t for t in tokenize(self.first_sentence) if t not in self.own_tokens)


@dataclass(frozen=True, slots=True)
class Corpus:
    """The documents in id order, with the Python that produced them."""

    documents: tuple[Document, ...]
    python_version: str
    platform: str

    @property
    def ids(self) -> tuple[str, ...]:
        """Document ids in order."""
        return tuple(d.id for d in self.documents)


def _members(module: str) -> Iterator[tuple[str, object]]:
    """(qualified name, object) of the public routines and classes of ``module``, and the public
    routines of those classes (own attributes), in sorted order."""
    mod = importlib.import_module(module)
    for name, obj in sorted(vars(mod).items()):
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        if inspect.isclass(obj):
            yield f"{module}.{name}", obj
            for attr, value in sorted(vars(obj).items()):
                if attr.startswith("_"):
                    continue
                raw = getattr(value, "__func__", value)  # staticmethod / classmethod
                if inspect.isroutine(value) or inspect.isroutine(raw):
                    yield f"{module}.{name}.{attr}", raw
        elif inspect.isroutine(obj):
            yield f"{module}.{name}", obj


def _docstrings(modules: Sequence[str]) -> list[tuple[str, str, int, str | None]]:
    """(module, qualified name, object id, docstring or None) for every member, modules sorted."""
    out = []
    with warnings.catch_warnings():
        # typing.io and typing.re warn when touched; the walk only reads their docstrings
        warnings.simplefilter("ignore", DeprecationWarning)
        for module in sorted(modules):
            for qualified, obj in _members(module):
                doc = getattr(obj, "__doc__", None)
                out.append((module, qualified, id(obj), doc if isinstance(doc, str) else None))
    return out


def build_corpus(modules: Sequence[str] = MODULES) -> Corpus:
    """The docstring corpus of ``modules`` (see the module docstring for the rules)."""
    seen_objects: set[int] = set()
    seen_texts: set[str] = set()
    documents: list[Document] = []
    for module, qualified, key, doc in _docstrings(modules):
        if doc is None or key in seen_objects:
            continue
        seen_objects.add(key)
        text = inspect.cleandoc(doc)
        parts = sentences(text)
        if len(parts) < 2 or text in seen_texts:
            continue
        seen_texts.add(text)
        documents.append(
            Document(
                id=qualified,
                module=module,
                name_tokens=tuple(tokenize(qualified)),
                own_tokens=frozenset(tokenize(qualified[len(module) + 1 :])),
                body_tokens=tuple(tokenize(text)),
                first_sentence=parts[0],
            )
        )
    documents.sort(key=lambda d: d.id)
    return Corpus(
        documents=tuple(documents),
        python_version=sys.version.split()[0],
        platform=platform.platform(terse=True),
    )


# --------------------------------------------------------------------------------------------
# BM25


class BM25Index:
    """BM25 (k1, b; Lucene's idf) over tokenised documents, as a documents x terms sparse matrix.

    ``weights[d, t] = idf(t) tf (k1 + 1) / (tf + k1 (1 - b + b |d| / avgdl))`` with
    ``idf(t) = log(1 + (N - df + 0.5) / (df + 0.5))``; a query's scores are
    ``weights @ [t in q]`` over its distinct known terms (unknown terms add nothing).
    """

    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float = K1, b: float = B) -> None:
        if not documents:
            raise ValueError("`documents` must hold at least one document; got 0.")
        vocabulary: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        for d, tokens in enumerate(documents):
            for token in tokens:
                rows.append(d)
                cols.append(vocabulary.setdefault(token, len(vocabulary)))
        n_docs = len(documents)
        tf = sp.csr_matrix(
            (np.ones(len(rows)), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
            shape=(n_docs, max(len(vocabulary), 1)),
        )
        tf.sum_duplicates()
        lengths = np.asarray([len(t) for t in documents], dtype=np.float64)
        avgdl = float(lengths.mean()) if lengths.mean() > 0 else 1.0
        df = np.bincount(tf.indices, minlength=tf.shape[1]).astype(np.float64)
        idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
        norm = k1 * (1.0 - b + b * lengths / avgdl)
        row_of = np.repeat(np.arange(n_docs), np.diff(tf.indptr))
        data = idf[tf.indices] * tf.data * (k1 + 1.0) / (tf.data + norm[row_of])
        self.vocabulary = vocabulary
        self.n_docs = n_docs
        self.weights_t = sp.csc_matrix(
            sp.csr_matrix((data, tf.indices, tf.indptr), shape=tf.shape).T
        )  # terms x documents, for query x terms @ terms x documents

    def query_matrix(self, queries: Sequence[Sequence[str]]) -> sp.csr_matrix:
        """Queries x terms, 1 for each distinct known term of a query."""
        rows: list[int] = []
        cols: list[int] = []
        for q, tokens in enumerate(queries):
            for t in sorted({self.vocabulary[t] for t in tokens if t in self.vocabulary}):
                rows.append(q)
                cols.append(t)
        return sp.csr_matrix(
            (np.ones(len(rows)), (rows, cols)), shape=(len(queries), self.weights_t.shape[0])
        )

    def scores(
        self, queries: Sequence[Sequence[str]], *, chunk: int = 512
    ) -> Iterator[npt.NDArray[np.float64]]:
        """Dense score rows (chunk x documents) for ``queries``, ``chunk`` queries at a time."""
        qm = self.query_matrix(queries)
        for a in range(0, qm.shape[0], chunk):
            yield np.asarray((qm[a : a + chunk] @ self.weights_t).toarray(), dtype=np.float64)

    def top1(self, queries: Sequence[Sequence[str]]) -> npt.NDArray[np.float64]:
        """The best score of each query (0 when no document shares a term with it)."""
        parts = [s.max(axis=1) for s in self.scores(queries)]
        return np.concatenate(parts) if parts else np.empty(0)

    def ranks(
        self, queries: Sequence[Sequence[str]], relevant: npt.ArrayLike
    ) -> npt.NDArray[np.int64]:
        """The rank (1-based) of ``relevant[i]`` for query i; 0 when it is not retrieved.

        Order: score descending, then document index descending (with ids sorted, that is
        trec_eval's tie order by document id descending); documents scoring 0 are not retrieved.
        """
        rel = np.asarray(relevant, dtype=np.int64)
        out = np.zeros(rel.size, dtype=np.int64)
        a = 0
        for block in self.scores(queries):
            idx = np.arange(a, a + block.shape[0])
            s = block[np.arange(block.shape[0]), rel[idx]]
            above = (block > s[:, None]).sum(axis=1)
            later = np.arange(self.n_docs)[None, :] > rel[idx][:, None]
            tied = ((block == s[:, None]) & later).sum(axis=1)
            out[idx] = np.where(s > 0, 1 + above + tied, 0)
            a += block.shape[0]
        return out


def ndcg_at_10(ranks: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """nDCG@10 of one relevant document at ``ranks`` (1-based; 0 = not retrieved)."""
    r = np.asarray(ranks, dtype=np.float64)
    hit = (r >= 1) & (r <= CUTOFF)
    return np.where(hit, 1.0 / np.log2(np.where(hit, r, 1.0) + 1.0), 0.0)


def rr_at_10(ranks: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Reciprocal rank cut at 10 of one relevant document at ``ranks`` (0 = not retrieved)."""
    r = np.asarray(ranks, dtype=np.float64)
    hit = (r >= 1) & (r <= CUTOFF)
    return np.where(hit, 1.0 / np.where(hit, r, 1.0), 0.0)


# --------------------------------------------------------------------------------------------
# the system: corpus, golden set, traffic pool and the three indexes


def index_documents(corpus: Corpus, variant: Variant) -> list[tuple[str, ...]]:
    """The documents' tokens as indexed by ``variant``.

    ``full``: name tokens + body; ``titles_only``: name tokens; ``milder``: name tokens + the body
    without a seeded ``MILDER_DROP`` share of its tokens (each token dropped independently).
    """
    if variant == "full":
        return [d.name_tokens + d.body_tokens for d in corpus.documents]
    if variant == "titles_only":
        return [d.name_tokens for d in corpus.documents]
    rng = np.random.default_rng(np.random.SeedSequence(GOLDEN_SEED, spawn_key=(1,)))
    out = []
    for d in corpus.documents:
        keep = rng.random(len(d.body_tokens)) >= MILDER_DROP
        out.append(d.name_tokens + tuple(t for t, k in zip(d.body_tokens, keep, strict=True) if k))
    return out


@dataclass(frozen=True, slots=True)
class System:
    """Everything a month needs, computed once: per index variant the golden nDCG@10 / RR@10 and
    the top-1 score of every pool query.

    ``golden``: document indices of the golden set (sorted); ``pool``: document indices of the
    traffic queries that are not golden; ``network_pool``: which of those are network modules'.
    """

    corpus: Corpus
    golden: npt.NDArray[np.int64]
    pool: npt.NDArray[np.int64]
    network_pool: npt.NDArray[np.bool_]
    ndcg: dict[str, npt.NDArray[np.float64]]
    rr: dict[str, npt.NDArray[np.float64]]
    pool_top1: dict[str, npt.NDArray[np.float64]]
    golden_top1: dict[str, npt.NDArray[np.float64]]

    @property
    def query_ids(self) -> npt.NDArray[np.str_]:
        """The golden queries' ids (their source documents' ids)."""
        return np.asarray([self.corpus.documents[i].id for i in self.golden])


def build_system(corpus: Corpus | None = None) -> System:
    """Corpus, golden sample, pool, and the three indexes' golden outcomes and pool scores."""
    corpus = build_corpus() if corpus is None else corpus
    queries = [d.query for d in corpus.documents]
    eligible = np.flatnonzero([len(q) > 0 for q in queries])
    rng = np.random.default_rng(np.random.SeedSequence(GOLDEN_SEED, spawn_key=(0,)))
    golden = np.sort(rng.choice(eligible, size=min(GOLDEN_SIZE, eligible.size), replace=False))
    pool = np.setdiff1d(eligible, golden)
    network_pool = np.asarray([corpus.documents[i].module in NETWORK_MODULES for i in pool])
    ndcg: dict[str, npt.NDArray[np.float64]] = {}
    rr: dict[str, npt.NDArray[np.float64]] = {}
    pool_top1: dict[str, npt.NDArray[np.float64]] = {}
    golden_top1: dict[str, npt.NDArray[np.float64]] = {}
    golden_queries = [queries[i] for i in golden]
    for variant in _VARIANTS:
        index = BM25Index(index_documents(corpus, variant))
        ranks = index.ranks(golden_queries, golden)
        ndcg[variant] = ndcg_at_10(ranks)
        rr[variant] = rr_at_10(ranks)
        pool_top1[variant] = index.top1([queries[i] for i in pool])
        golden_top1[variant] = index.top1(golden_queries)
    return System(corpus, golden, pool, network_pool, ndcg, rr, pool_top1, golden_top1)


# --------------------------------------------------------------------------------------------
# scenarios and logs


@dataclass(frozen=True, slots=True)
class RealScenario:
    """What changes at ``onset`` (offset from the origin): the index, or the traffic mix."""

    name: str
    index_after: Variant = "full"
    network_share_after: float = NETWORK_SHARE
    expected: str | None = None
    onset: timedelta | None = ONSET


SCENARIOS: dict[str, RealScenario] = {
    s.name: s
    for s in (
        RealScenario("healthy"),
        RealScenario("titles_only", index_after="titles_only", expected="model_decay"),
        RealScenario(
            "query_mix", network_share_after=NETWORK_SHARE_AFTER_MIX, expected="data_drift"
        ),
        RealScenario("milder", index_after="milder", expected="model_decay"),
    )
}


def _hours(t: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    return (t % (24 * _US_PER_HOUR)) / _US_PER_HOUR


def score_log(
    system: System, scenario: RealScenario, origin: datetime, seed: int
) -> tuple[npt.NDArray[np.datetime64], npt.NDArray[np.float64]]:
    """Timestamps (datetime64[us], sorted) and top-1 scores of ``[origin, origin + 38 d)``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    o_us = _us(origin)
    n_hours = CHECKS_END // HOUR
    starts = o_us + np.arange(n_hours, dtype=np.int64) * _US_PER_HOUR
    cycle = np.cos(2 * np.pi * (_hours(starts) - PEAK_HOUR) / 24)
    counts = rng.poisson(SCORES_PER_HOUR * (1 + VOLUME_AMPLITUDE * cycle))
    ts = np.repeat(starts, counts) + rng.integers(0, _US_PER_HOUR, counts.sum())
    ts.sort()
    n = ts.size
    onset_us = (
        None if scenario.onset is None else o_us + scenario.onset // timedelta(microseconds=1)
    )
    after = np.zeros(n, bool) if onset_us is None else ts >= onset_us
    base = np.where(after, scenario.network_share_after, NETWORK_SHARE)
    share = np.clip(
        base + NETWORK_AMPLITUDE * np.cos(2 * np.pi * (_hours(ts) - PEAK_HOUR) / 24), 0, 1
    )
    golden_hit = rng.random(n) < GOLDEN_TRAFFIC_SHARE
    network_hit = rng.random(n) < share
    pick = rng.random(n)
    net_idx = np.flatnonzero(system.network_pool)
    other_idx = np.flatnonzero(~system.network_pool)
    pool_pos = np.where(
        network_hit,
        net_idx[(pick * net_idx.size).astype(np.int64)],
        other_idx[(pick * other_idx.size).astype(np.int64)],
    )
    golden_pos = (pick * system.golden.size).astype(np.int64)
    scores = np.empty(n)
    for variant, mask in (("full", ~after), (scenario.index_after, after)):
        pool_scores = system.pool_top1[variant][pool_pos[mask]]
        gold_scores = system.golden_top1[variant][golden_pos[mask]]
        scores[mask] = np.where(golden_hit[mask], gold_scores, pool_scores)
    return ts.astype("datetime64[us]"), scores


def outcome_log(
    system: System, scenario: RealScenario, origin: datetime, seed: int
) -> tuple[npt.NDArray[np.datetime64], npt.NDArray[np.str_], npt.NDArray[np.float64]]:
    """One golden-set run a day at 02:00 UTC over 15 minutes; nDCG@10 of the index at its start."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))
    ids = system.query_ids
    ts_parts, id_parts, out_parts = [], [], []
    for day in range(CHECKS_END.days):
        start = origin + timedelta(days=day, hours=EVALUATION_HOUR)
        changed = scenario.onset is not None and start >= origin + scenario.onset
        variant = scenario.index_after if changed else "full"
        offsets = np.sort(rng.integers(0, RUN_LENGTH // timedelta(microseconds=1), ids.size))
        order = rng.permutation(ids.size)  # queries run in a random order
        ts_parts.append(_us(start) + offsets)
        id_parts.append(ids[order])
        out_parts.append(system.ndcg[variant][order])
    return (
        np.concatenate(ts_parts).astype("datetime64[us]"),
        np.concatenate(id_parts),
        np.concatenate(out_parts),
    )


def _us(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def write_month(
    directory: Path, system: System, scenario: RealScenario, month: int
) -> tuple[Path, datetime]:
    """Write month ``month`` of ``scenario`` in ``write_world``'s layout; (config path, origin)."""
    # Imported here so that building the system in memory never loads pyarrow.
    from monitor.simulate import Scenario, config_text, split_by_day
    from monitor.sources import write_parquet

    origin = BASE + timedelta(days=month)
    seed = 9000 + month
    ts, scores = score_log(system, scenario, origin, seed)
    ots, qids, outcomes = outcome_log(system, scenario, origin, seed)
    logs = (
        ("scores", ts, {"timestamp": ts, "score": scores}),
        ("outcomes", ots, {"timestamp": ots, "query_id": qids, "outcome": outcomes}),
    )
    for name, stamps, cols in logs:
        for date, part in split_by_day(stamps, cols):
            write_parquet(directory / name / f"date={date}" / "part-0.parquet", part)
    config = directory / "monitor.toml"
    # write_world's own text: the shipped defaults, hourly schedule, paths relative to it.
    config.write_text(
        config_text(
            Scenario(scenario.name),
            monitor_name=scenario.name,
            schedule="1h",
            listen="127.0.0.1:0",
            seed=seed,
            extra="",
        )
    )
    return config, origin


# --------------------------------------------------------------------------------------------
# replay


@dataclass(frozen=True, slots=True)
class MonthResult:
    """One replayed month of one scenario.

    ``false_drift_alarms`` / ``false_decay_alarms``: changes into ``data_drift`` / ``model_decay``
    at checks before the onset (every check in ``healthy``); ``delay_h``: onset to the first
    later check in the expected state; ``after_landing_h`` (decay only): the end of the first
    golden-set run after the onset to that check; ``share_right``: share of post-onset checks in
    the expected state; ``changes_after_onset``: state changes between post-onset checks;
    ``left_expected``: state changes after the first check in the expected state (0: held);
    ``states_after``: checks per state after onset; ``ndcg_drop``: mean golden nDCG@10 before
    minus after;
    ``psi``: PSI of the logged top-1 scores of the week after the onset against the week before
    (``monitor.stats.build_baseline`` / ``psi``, 10 quantile bins of the week before);
    ``errors``: checks that ended in ``error`` (any fails the run: a month of failed checks
    read as a perfect month with no false alarm).
    """

    scenario: str
    month: int
    checks: int
    false_drift_alarms: int
    false_decay_alarms: int
    delay_h: float | None
    after_landing_h: float | None
    share_right: float | None
    changes_after_onset: int | None
    left_expected: int | None
    states_after: dict[str, int]
    ndcg_drop: float
    psi: float
    zero_share_before: float
    zero_share_after: float
    scores_per_hour: float
    seconds: float
    errors: int = 0  # checks that ended in error (no alarm, but no verdict either)


def run_month(
    system: System,
    scenario: RealScenario,
    month: int,
    workdir: Path,
    *,
    first: timedelta = CHECKS_START,
    last: timedelta = CHECKS_END,
    schedule: str | None = None,
) -> MonthResult:
    """Write month ``month`` of ``scenario`` under ``workdir`` and replay the checks in
    ``[origin + first, origin + last)`` with ``monitor.backtest`` (``schedule``: replace the
    shipped hourly schedule, to keep a test short)."""
    from monitor.backtest import backtest
    from monitor.config import load_config
    from monitor.stats import build_baseline, psi

    config_path, origin = write_month(workdir, system, scenario, month)
    if schedule is not None:
        text = config_path.read_text()
        config_path.write_text(text.replace('schedule = "1h"', f'schedule = "{schedule}"', 1))
    t0 = time.perf_counter()
    (result,) = backtest(load_config(config_path), origin + first, origin + last - HOUR)
    seconds = time.perf_counter() - t0
    checks = result.checks
    onset = origin + (scenario.onset or ONSET)
    drift = decay = 0
    previous = None
    for c in checks:
        # any alarm here is false (the check at the onset slot decides on data before it)
        quiet = scenario.expected is None or c.at <= onset
        if quiet and c.state != previous:
            drift += c.state == "data_drift"
            decay += c.state == "model_decay"
        previous = c.state
    delay = landing_delay = right = changes = left = None
    after = [c for c in checks if c.at > onset]
    if scenario.expected is not None:
        hit = next((c for c in after if c.state == scenario.expected), None)
        if hit is not None:
            delay = (hit.at - onset) / HOUR
            if scenario.expected == "model_decay":
                run = datetime.combine(onset.date(), datetime.min.time(), UTC) + timedelta(
                    hours=EVALUATION_HOUR
                )
                run += timedelta(days=1) if run < onset else timedelta(0)
                landing_delay = (hit.at - (run + RUN_LENGTH)) / HOUR
        right = sum(c.state == scenario.expected for c in after) / max(len(after), 1)
        # from the last check at or before the onset: a raise at the first check after it is
        # a change too (counted from the second one, a one-hour detection read as no change)
        before = [c for c in checks if c.at <= onset][-1:]
        changes = sum(1 for a, b in itertools.pairwise(before + after) if a.state != b.state)
        if hit is not None:
            held = [c for c in after if c.at >= hit.at]
            left = sum(1 for a, b in itertools.pairwise(held) if a.state != b.state)
    states: dict[str, int] = {}
    for c in after:
        states[c.state] = states.get(c.state, 0) + 1
    ts, scores = score_log(system, scenario, origin, 9000 + month)
    week = np.timedelta64(7, "D")
    o64 = np.datetime64(onset.replace(tzinfo=None), "us")
    before_s = scores[(ts >= o64 - week) & (ts < o64)]
    after_s = scores[(ts >= o64) & (ts < o64 + week)]
    return MonthResult(
        scenario=scenario.name,
        month=month,
        checks=len(checks),
        false_drift_alarms=drift,
        false_decay_alarms=decay,
        delay_h=delay,
        after_landing_h=landing_delay,
        share_right=right,
        changes_after_onset=changes,
        left_expected=left,
        states_after=dict(sorted(states.items())),
        ndcg_drop=float(system.ndcg["full"].mean() - system.ndcg[scenario.index_after].mean()),
        psi=float(psi(build_baseline(before_s), after_s).statistic),
        zero_share_before=float((before_s == 0).mean()),
        zero_share_after=float((after_s == 0).mean()),
        scores_per_hour=ts.size / (CHECKS_END / HOUR),
        seconds=seconds,
        errors=sum(c.state == "error" for c in checks),
    )


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson score 95 % interval (scipy's), as bench/detection.py reports it."""
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def summarize(results: Sequence[MonthResult]) -> dict[str, dict[str, Any]]:
    """Per scenario over its months: P(any false alarm) with a Wilson 95 % interval, delays
    (median and max), mean share of post-onset checks right, most state changes, true effects."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.scenario for r in results):
        rows = [r for r in results if r.scenario == name]
        n = len(rows)
        false_any = sum(r.false_drift_alarms + r.false_decay_alarms > 0 for r in rows)
        delays = sorted(r.delay_h for r in rows if r.delay_h is not None)
        entry: dict[str, Any] = {
            "months": n,
            "p_any_false_alarm": false_any / n,
            "p_any_false_alarm_ci": _wilson(false_any, n),
            "false_drift_alarms": sum(r.false_drift_alarms for r in rows),
            "false_decay_alarms": sum(r.false_decay_alarms for r in rows),
            "ndcg_drop": sum(r.ndcg_drop for r in rows) / n,
            "psi_mean": sum(r.psi for r in rows) / n,
            "error_checks": sum(r.errors for r in rows),
        }
        if SCENARIOS[name].expected is not None:
            entry |= {
                "detected": len(delays) / n,
                "delay_median_h": statistics.median(delays) if delays else None,
                "delay_max_h": delays[-1] if delays else None,
                "share_right": sum(r.share_right or 0.0 for r in rows) / n,
                "changes_after_onset_max": max(r.changes_after_onset or 0 for r in rows),
                "left_expected_max": max(r.left_expected or 0 for r in rows),
            }
        out[name] = entry
    return out


def format_summary(summary: dict[str, dict[str, Any]]) -> str:
    """The per-scenario summary as a markdown table."""
    lines = [
        "| scenario | months | P(any false alarm before onset) [95 % Wilson] "
        "| delay median / max (h) | post-onset checks right | changes after onset, max "
        "(after reaching it) | mean nDCG@10 drop | PSI after vs before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, e in summary.items():
        lo, hi = e["p_any_false_alarm_ci"]
        if "detected" not in e:
            delay = right = changes = "-"
        else:
            delay = (
                "never"
                if e["delay_median_h"] is None
                else f"{e['delay_median_h']:.0f} / {e['delay_max_h']:.0f}"
            )
            right = f"{e['share_right']:.0%}"
            changes = f"{e['changes_after_onset_max']} ({e['left_expected_max']})"
        lines.append(
            f"| {name} | {e['months']} | {e['p_any_false_alarm']:.0%} [{lo:.0%}, {hi:.0%}] "
            f"| {delay} | {right} | {changes} | {e['ndcg_drop']:.3f} | {e['psi_mean']:.3f} |"
        )
    return "\n".join(lines)


def format_table(results: Sequence[MonthResult]) -> str:
    """One markdown row per scenario-month."""
    lines = [
        "| scenario | month | false drift / decay alarms before onset | delay from onset (h) "
        "| from the run's landing (h) | post-onset checks right | changes after onset "
        "(after reaching it) "
        "| post-onset states | nDCG@10 drop | PSI week after vs before | zeros before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        states = ", ".join(f"{k} {v}" for k, v in r.states_after.items())
        lines.append(
            f"| {r.scenario} | {r.month} | {r.false_drift_alarms} / {r.false_decay_alarms} "
            f"| {_fmt(r.delay_h, '.0f')} | {_fmt(r.after_landing_h, '.2f')} "
            f"| {_fmt(r.share_right, '.0%')} | {_fmt(r.changes_after_onset, 'd')} "
            f"({_fmt(r.left_expected, 'd')}) | {states} "
            f"| {r.ndcg_drop:.3f} | {r.psi:.3f} "
            f"| {r.zero_share_before:.1%} / {r.zero_share_after:.1%} |"
        )
    return "\n".join(lines)


def describe(system: System) -> dict[str, Any]:
    """The collection's figures: sizes, Python, mean golden nDCG@10 / RR@10 per index."""
    c = system.corpus
    return {
        "python": c.python_version,
        "platform": c.platform,
        "modules": len(MODULES),
        "documents": len(c.documents),
        "golden_queries": int(system.golden.size),
        "pool_queries": int(system.pool.size),
        "system_share_of_pool": float(system.network_pool.mean()),
        "mean_ndcg_at_10": {k: float(v.mean()) for k, v in system.ndcg.items()},
        "mean_rr_at_10": {k: float(v.mean()) for k, v in system.rr.items()},
        "golden_ndcg_zero_share": {k: float((v == 0).mean()) for k, v in system.ndcg.items()},
    }


def main(argv: list[str] | None = None) -> int:
    """Build the system, replay ``--months`` months of every scenario, print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--months", type=int, default=1)
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    names = [n for n in args.scenarios.split(",") if n]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        print(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    system = build_system()
    info = describe(system)
    print(json.dumps(info, indent=1), f"(built in {time.perf_counter() - t0:.1f} s)", flush=True)
    results: list[MonthResult] = []
    for name, month in itertools.product(names, range(args.months)):
        with tempfile.TemporaryDirectory() as tmp:
            r = run_month(system, SCENARIOS[name], month, Path(tmp))
        results.append(r)
        print(f"{name} month {month}: {dataclasses.asdict(r)}", flush=True)
    summary = summarize(results)
    print(format_table(results))
    print(format_summary(summary))
    if args.json:
        payload = {
            "command": " ".join(
                ["python bench/realworld.py", *(sys.argv[1:] if argv is None else argv)]
            ),
            "collection": info,
            "summary": summary,
            "months": [dataclasses.asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(payload, indent=1))
    failed = [f"{r.scenario} month {r.month}: {r.errors} checks in error" for r in results]
    failed = [line for line, r in zip(failed, results, strict=True) if r.errors]
    for line in failed:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
