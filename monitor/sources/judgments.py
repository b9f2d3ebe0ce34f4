"""Graded judgments (qrels), read and coded once per version (``outcomes.judgments``).

Parquet with ``query_id``, ``doc_id``, ``grade`` (names configurable) or TREC qrels. A
judgments directory whose entries are ``version=<name>`` directories holds versions; the last
name in sort order is used unless a version is pinned. The coded judgments (the query ids'
codes, the documents' ``IdKeys``, the join index of ``monitor.sources.ranked``) are cached by
the chosen files' paths, sizes and modification times, so every check scores both windows
against the same judgments and a judgment update never looks like decay.
"""

from __future__ import annotations

import glob
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from monitor.errors import SchemaError, SourceNotFoundError
from monitor.sources import footers
from monitor.sources.columns import (
    _floats,
    _require_label,
    _require_numeric,
)
from monitor.sources.footers import _FOOTERS, _Footer, _opened, refuse_nul
from monitor.sources.model import (
    FloatArray,
    IntArray,
    JudgedSpec,
)
from monitor.sources.paths import _File, _list_dir, _resolve, _Source, _walk
from monitor.sources.ranked import (
    Conflict,
    IdKeys,
    JudgmentIndex,
    id_keys,
    index_judgments,
)
from monitor.sources.textfiles import _is_parquet, _tokens
from monitor.sources.translate import _translate

_CACHE_LOCK = threading.Lock()
_JUDGMENTS: OrderedDict[tuple[str, str, tuple[str, str, str], int], _Judgments] = OrderedDict()
_MAX_JUDGMENTS = 4


@dataclass(frozen=True, slots=True)
class _Judgments:
    names: pa.Array  # the judged query ids (string); a query's code is its position
    codes: dict[str, int]  # query id -> code
    name_array: npt.NDArray[np.str_]  # ``names`` as numpy strings
    index: JudgmentIndex
    version: str
    path: str
    fmt: str


def judgments_version(judged: JudgedSpec) -> str:
    """The version of the judgments a check would use now (name and content fingerprint)."""
    return _load_judgments(judged).version


def _load_judgments(judged: JudgedSpec) -> _Judgments:
    source = _resolve(judged.judgments, False)
    name, chosen = _version(source, judged)
    files = list(_walk(chosen, lambda interval: True))
    if not files:
        raise SourceNotFoundError(
            "holds no judgment file", path=chosen.display, hint="check outcomes.judgments"
        )
    listing = "\n".join("\t".join(map(str, f.identity)) for f in files)
    print_ = hashlib.sha256(listing.encode()).hexdigest()[:12]
    # what is read of the files too: two monitors may grade from other columns of one file
    columns = (judged.judgment_query_column, judged.judgment_doc_column, judged.grade_column)
    key = (chosen.display, print_, columns, footers.CLEARED)  # clear_cache forgets them too
    with _CACHE_LOCK:
        hit = _JUDGMENTS.get(key)
        if hit is not None:
            _JUDGMENTS.move_to_end(key)
            return hit
    names: dict[str, int] = {}
    capacity = 0
    batches: list[tuple[_File, Iterator[tuple[pa.Array, pa.Array, FloatArray]]]] = []
    kinds = set()
    for f in files:
        if _is_parquet(chosen, f):
            kinds.add("parquet")
            footer = _FOOTERS.get(chosen, f)
            capacity += footer.metadata.num_rows
            batches.append((f, _parquet_judgments(chosen, f, footer, judged)))
        else:
            kinds.add("trec")
            fields = _tokens(chosen, f, 4, "qid 0 docid grade", text=(0, 2), numbers={3: "grade"})
            if not fields.rows:  # a 0-byte file too (no parquet magic): one being copied
                raise SchemaError(
                    "holds no judgment lines: an empty file, or one still being written; "
                    "the judgments grade both windows, so a partial version is refused",
                    path=f.path,
                    hint="write a judgments version whole, then publish it (a new version=)",
                )
            capacity += fields.rows
            trec = (fields.text[0], fields.text[2], fields.numbers[3])
            batches.append((f, iter([trec])))
    if len(kinds) > 1:
        raise SchemaError(
            "mixes parquet and text files",
            path=chosen.display,
            hint="keep TREC qrels and parquet judgments in separate versions",
        )
    codes = np.empty(capacity, dtype=np.int64)
    grades = np.empty(capacity)
    keys = _KeySink(capacity)
    n = 0
    for f, parts in batches:
        for q, d, g in parts:
            refuse_nul(q, f.path, judged.judgment_query_column if _is_parquet(chosen, f) else None)
            bad = ~np.isfinite(g) | (g < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise SchemaError(
                    f"query {q[i].as_py()!r}, document {d[i].as_py()!r} has grade {float(g[i]):g}; "
                    "grades must be finite and >= 0",
                    path=f.path,
                    column=judged.grade_column,
                    hint="map negative grades (e.g. spam = -2) to 0 upstream",
                )
            m = len(q)
            codes[n : n + m] = _name_codes(q, names)
            grades[n : n + m] = g
            keys.add(n, id_keys(d))
            n += m
    version = f"{name} ({print_})" if name else print_
    doc_keys = keys.keys(n)
    index = index_judgments(codes[:n], doc_keys, grades[:n], len(names))
    query_names = pa.array(list(names), pa.string())
    if isinstance(index, Conflict):
        raise SchemaError(
            f"query {query_names[index.query].as_py()!r}: document "
            f"{doc_keys.name(index.row)!r} is judged twice with different grades "
            f"({index.grades[0]:g} and {index.grades[1]:g})",
            path=chosen.display,
            hint="keep one grade per (query, document); pin a judgments version to compare",
        )
    result = _Judgments(
        names=query_names,
        codes=names,
        name_array=np.asarray(list(names), dtype=np.str_),
        index=index,
        version=version,
        path=chosen.display,
        fmt="+".join(sorted(kinds)),
    )
    with _CACHE_LOCK:
        _JUDGMENTS[key] = result
        while len(_JUDGMENTS) > _MAX_JUDGMENTS:
            _JUDGMENTS.popitem(last=False)
    return result


def _version(source: _Source, judged: JudgedSpec) -> tuple[str | None, _Source]:
    """The ``version=<name>`` directory to use (pinned or the last), or the whole source."""
    if source.is_file:
        if judged.judgments_version is not None:  # a pin that nothing would honour
            raise SourceNotFoundError(
                f"is one file, which has no version={judged.judgments_version} directory",
                path=source.display,
                hint="unset outcomes.judgments_version, or lay versions out as "
                "version=<name>/ in a directory",
            )
        return None, source
    entries = _list_dir(source, source.root)
    versions = sorted(
        e.base_name[len("version=") :]
        for e in entries
        if e.is_dir and e.base_name.startswith("version=")
    )
    # a version that cannot be followed (a dangling link, a FIFO) that would be the one used:
    # the pinned one, or one newer than every readable one (left out, an older one graded
    # the outcomes without a word); an older broken one is never read, and fails nothing
    for e in entries:
        broken = e.base_name[len("version=") :] if e.base_name.startswith("version=") else None
        if e.problem is not None and broken is not None:
            pinned = judged.judgments_version
            if broken == pinned or (pinned is None and (not versions or broken > versions[-1])):
                raise e.problem
    if not versions:
        if judged.judgments_version is not None:
            raise SourceNotFoundError(
                f"has no version={judged.judgments_version} directory (no versions at all)",
                path=source.display,
                hint="unset outcomes.judgments_version, or lay versions out as version=<name>/",
            )
        return None, source
    name = judged.judgments_version if judged.judgments_version is not None else versions[-1]
    if name not in versions:
        raise SourceNotFoundError(
            f"has no version={name} directory; versions found: {', '.join(versions)}",
            path=source.display,
            hint="fix outcomes.judgments_version",
        )
    # the display is the literal path (a config directory named like a glob unescaped):
    # escaped again, or 'br[1]/qrels' was read as a glob and matched no version
    chosen = glob.escape(source.display.rstrip("/")) + "/" + glob.escape(f"version={name}")
    return name, _resolve(chosen, False)


def _parquet_judgments(
    source: _Source, f: _File, footer: _Footer, judged: JudgedSpec
) -> Iterator[tuple[pa.Array, pa.Array, FloatArray]]:
    """The judgments of one parquet file, batch by batch (query ids, document ids, grades)."""
    for col, role, key in (
        (judged.judgment_query_column, "query id", "judgment_query_column"),
        (judged.judgment_doc_column, "document id", "judgment_doc_column"),
    ):
        _require_label(footer, f, col, role, key)
    gcol = judged.grade_column
    _require_numeric(footer, f, gcol, "grade", "grade_column")
    columns = [judged.judgment_query_column, judged.judgment_doc_column, gcol]
    row = 0
    with _opened(source, f, footer) as pf:
        try:
            for batch in pf.iter_batches(batch_size=_BATCH, columns=columns, use_threads=True):
                q = _strings(batch.column(0))
                d = _strings(batch.column(1))
                g, valid = _floats(pa.chunked_array([batch.column(2)]))
                ok = _valid(q) & _valid(d)
                if valid is not None:
                    ok &= valid
                if not ok.all():
                    i = int(np.flatnonzero(~ok)[0])
                    raise SchemaError(
                        f"row {row + i} has a null query id, document id or grade",
                        path=f.path,
                        hint="every judgment needs all three",
                    )
                row += len(q)
                yield q, d, g
        except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
            raise _translate(exc, f.path, "reading the judgments") from exc


def _name_codes(strings: pa.Array, names: dict[str, int]) -> IntArray:
    """Codes of ``strings`` in ``names`` (new names get the next codes, in order of
    appearance); each batch's distinct values are looked up once."""
    encoded = pc.dictionary_encode(strings)
    codes = np.array(
        [names.setdefault(v, len(names)) for v in encoded.dictionary.to_pylist()], dtype=np.int64
    )
    return codes[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]


_BATCH = 1 << 16  # rows decoded at a time: Arrow holds one batch, numpy the coded rows


class _KeySink:
    """``IdKeys`` rows filled in place; the word matrix widens (one copy) if a later batch
    holds a longer id than any before."""

    def __init__(self, capacity: int) -> None:
        self.words = np.zeros((1, capacity), dtype=np.uint64)
        self.length = np.empty(capacity, dtype=np.int32)
        self.fp = np.empty(capacity, dtype=np.uint64)
        self.long: dict[int, bytes] = {}  # ids past their batch's words, whole (``IdKeys``)

    def add(self, at: int, keys: IdKeys) -> None:
        width = keys.words.shape[0]
        if width > self.words.shape[0]:
            wider = np.zeros((width, self.length.size), dtype=np.uint64)
            wider[: self.words.shape[0], :at] = self.words[:, :at]
            self.words = wider
        end = at + keys.size
        self.words[:width, at:end] = keys.words
        self.words[width:, at:end] = 0
        self.length[at:end] = keys.length
        self.fp[at:end] = keys.fp
        for row, raw in keys.long.items():
            self.long[at + row] = raw

    def keys(self, n: int) -> IdKeys:
        long = {r: b for r, b in self.long.items() if r < n}
        return IdKeys(self.words[:, :n], self.length[:n], self.fp[:n], long)


def _strings(chunked: pa.ChunkedArray | pa.Array) -> pa.Array:
    arr = _one_array(chunked)
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string())
    return arr


def _one_array(chunked: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The values as one array (a lone chunk as it is, not copied)."""
    if not isinstance(chunked, pa.ChunkedArray):
        return chunked
    return chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()


def _concat(parts: list[pa.Array]) -> pa.Array:
    if not parts:
        return pa.array([], pa.string())
    return pa.concat_arrays([_strings(p) for p in parts])


def _valid(arr: pa.Array) -> npt.NDArray[np.bool_]:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


__all__ = ["judgments_version"]
