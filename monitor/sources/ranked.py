"""Ranked lists placed and joined to their judgments without hashing every id string in Arrow.

The judged-runs reader hands this module, per batch of run rows, the Arrow string arrays of
query and document ids; it returns numpy arrays a metric needs: each row's list, its judged grade
and whether it has one, in placement order and without duplicates.

Identity of an id is its exact bytes. Each id is read as ``IdKeys``: its bytes as little-endian
64-bit words (zero padded), its length, and a 64-bit fingerprint of both; a window's rows keep
only the fingerprint and the id in Arrow (``RowIds``: bytes read again for the rows that need
them). Searching and de-duplicating use the fingerprint (packed with the query or list code into
one int64 key, so a join is a lookup in a bucketed hash of the judgments' keys and duplicates
one sort of integers); every match a key finds is then confirmed on the words and the length,
so a fingerprint collision can cost time, never a wrong grade or a wrong duplicate. A key
shared by two different judged documents of one query (a collision inside the judgments) marks
that key ambiguous, and rows that hit it are resolved one by one against each candidate.

Placement (``docs/outcomes.md``): within a list, rank ascending when the runs have ranks, ties
(and rows without a rank, which come last) by score descending (rows without a score last),
then by document id descending in byte order, trec_eval's own final tie rule. Input that is
already in that order with no ties (the usual case: each list written best first) is checked in
one pass and not sorted. Of duplicate documents in a list the best placed is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from monitor.stats.ranking import ordinal_codes

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_SEED = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_S29 = np.uint64(29)


WORDS = 8  # words kept of every id at least (64 bytes)
LONG_SHARE = 0.01  # at most this share of a batch's ids are longer than the words kept


@dataclass(frozen=True, slots=True)
class IdKeys:
    """Exact content of n id strings: ``words`` (w, n) uint64, word j of an id holding its
    bytes 8j .. 8j + 7 little-endian, zero padded; ``length`` in bytes; ``fp`` a 64-bit
    fingerprint of (length, every word of the id); ``long``: by row, the whole bytes of the ids
    longer than w words (their words hold their first 8w bytes). w covers all but the longest
    ``LONG_SHARE`` of the ids (at least ``WORDS``): the longest id once set the width of all,
    and one 4 KB URL among 200k document ids made their words 800 MB."""

    words: UIntArray
    length: npt.NDArray[np.signedinteger[Any]]  # int32 or int64, as the Arrow offsets
    fp: UIntArray
    long: dict[int, bytes] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.length.size)

    def take(self, rows: npt.NDArray[np.integer[Any]]) -> IdKeys:
        # take, not words[:, rows]: that is laid out id by id, and reading one word of many
        # ids then strides (5x slower in the join)
        long = {}
        if self.long:
            held = self.long
            long = {i: held[r] for i, r in enumerate(rows.tolist()) if r in held}
        return IdKeys(self.words.take(rows, axis=1), self.length[rows], self.fp[rows], long)

    def keys(self, rows: npt.NDArray[np.integer[Any]]) -> IdKeys:
        """The ``IdKeys`` of ``rows`` (as ``RowIds.keys``)."""
        return self.take(rows)

    def raw(self, row: int) -> bytes:
        """The bytes of one row's id."""
        if row in self.long:
            return self.long[row]
        return self.words[:, row].astype("<u8").tobytes()[: int(self.length[row])]

    def name(self, row: int) -> str:
        """The id of one row, as text (for error messages)."""
        return self.raw(row).decode("utf-8", errors="replace")

    def equal(
        self,
        rows: npt.NDArray[np.integer[Any]],
        other: IdKeys,
        other_rows: npt.NDArray[np.integer[Any]],
    ) -> BoolArray:
        """Whether id ``rows[i]`` here has the same bytes as ``other_rows[i]`` in ``other``."""
        length = self.length.take(rows)
        same_length = np.asarray(length == other.length.take(other_rows), dtype=bool)
        same: BoolArray = same_length.copy()
        w = min(self.words.shape[0], other.words.shape[0])
        for j in range(w):  # ids of equal length fit in min(w) words on both sides
            same &= self.words[j].take(rows) == other.words[j].take(other_rows)
        if self.long or other.long:
            # an id past the words kept on either side is decided on its bytes alone: in a
            # sink of batches of several widths its words past its own batch's are zero
            long = np.zeros(rows.size, dtype=bool)
            if self.long:
                long |= np.isin(rows, np.fromiter(self.long, dtype=np.int64))
            if other.long:
                long |= np.isin(other_rows, np.fromiter(other.long, dtype=np.int64))
            for i in np.flatnonzero(long & same_length).tolist():
                same[i] = self.raw(int(rows[i])) == other.raw(int(other_rows[i]))
        return same


def _fmix(h: UIntArray) -> UIntArray:
    """MurmurHash3's 64-bit finalizer, in place."""
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


def _word_constant(j: int) -> np.uint64:
    """An odd multiplier for word j (Weyl sequence of the golden ratio)."""
    return np.uint64(((2 * j + 1) * 0x9E3779B97F4A7C15) & ((1 << 64) - 1) | 1)


def _add_words(h: UIntArray, words: UIntArray, first: int = 0) -> UIntArray:
    """``h += sum over rows j of words of x ^ (x >> 29)``, x = word_j * C_(first + j) (the
    fingerprint's sum; ``first``: the position of the first row); returns a scratch array."""
    x = np.empty_like(h)
    shifted = np.empty_like(h)
    for j in range(words.shape[0]):
        np.multiply(words[j], _word_constant(first + j), out=x)
        np.right_shift(x, _S29, out=shifted)
        x ^= shifted
        h += x
    return x


def fingerprint(
    words: UIntArray, length: npt.NDArray[np.signedinteger[Any]], more: UIntArray | None = None
) -> UIntArray:
    """Fingerprint of ids from their words: h = length * M2 + sum over words j of x ^ (x >> 29),
    x = word_j * C_j (C_j odd, one per position; mod 2^64), then h ^= h >> 33, h *= M1,
    h ^= h >> 33 (M1, M2: MurmurHash3's finalizer constants). A zero word adds nothing, so the
    value does not depend on the padding width; ``more``: each id's sum over its words past
    ``words`` (ids longer than the words kept). In place, two arrays of scratch."""
    h = length.astype(np.uint64)
    h *= _M2
    if more is not None:
        h += more
    x = _add_words(h, words)
    np.right_shift(h, _S33, out=x)
    h ^= x
    h *= _M1
    np.right_shift(h, _S33, out=x)
    h ^= x
    return h


def id_keys(strings: pa.Array) -> IdKeys:
    """The ``IdKeys`` of a non-null string (or binary) array, read off its Arrow buffers."""
    n = len(strings)
    if n == 0:
        return IdKeys(np.zeros((1, 0), np.uint64), np.zeros(0, np.int64), np.zeros(0, np.uint64))
    large = pa.types.is_large_string(strings.type) or pa.types.is_large_binary(strings.type)
    buffers = strings.buffers()
    offsets = np.frombuffer(
        buffers[1], dtype=np.int64 if large else np.int32, count=strings.offset + n + 1
    )[strings.offset :]
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.empty(last - first + 8, dtype=np.uint8)
    data[last - first :] = 0
    if last > first and buffers[2] is not None:
        data[: last - first] = np.frombuffer(buffers[2], dtype=np.uint8)[first:last]
    start = cast(npt.NDArray[np.signedinteger[Any]], offsets[:-1] - first)  # int32: faster
    length = np.diff(offsets)
    width = max(int((int(length.max()) + 7) // 8), 1)
    # the width that holds all but the longest LONG_SHARE, at least WORDS
    common = int(
        np.partition(length, int((n - 1) * (1 - LONG_SHARE)))[int((n - 1) * (1 - LONG_SHARE))]
    )
    kept = min(width, max(WORDS, (common + 7) // 8))
    # every 8-byte window of the padded data, as one unaligned little-endian word
    windows = np.ndarray((data.size - 7,), dtype="<u8", buffer=data, strides=(1,))
    words = np.empty((kept, n), dtype=np.uint64)
    long: dict[int, bytes] = {}
    if width > kept:  # the bytes of the ids past the words kept, whole
        starts = (offsets[:-1] - first).tolist()
        for i in np.flatnonzero(length > 8 * kept).tolist():
            long[i] = data[starts[i] : starts[i] + int(length[i])].tobytes()
    last_window = data.size - 8
    left = np.minimum(length, 8)
    for j in range(kept):
        if j:
            start += 8
            np.minimum(start, last_window, out=start)  # past an id's end: masked to zero
            np.subtract(length, 8 * j, out=left)
            np.clip(left, 0, 8, out=left)
        words[j] = windows[start]  # not np.take: it copies the strided windows whole first
        words[j] &= _MASKS[left]
    if not long:
        return IdKeys(words, length, fingerprint(words, length), long)
    more = np.zeros(n, dtype=np.uint64)  # the words past those kept: only long ids have any
    for i, raw in long.items():
        rest = np.frombuffer(raw + bytes(-len(raw) % 8), dtype="<u8")[kept:, None]
        _add_words(more[i : i + 1], rest.astype(np.uint64), first=kept)
    return IdKeys(words, length, fingerprint(words, length, more), long)


@dataclass(frozen=True, slots=True)
class RowIds:
    """The document ids of run rows: each row's ``fp`` (as ``IdKeys.fp``) and the ids in Arrow
    ``chunks``, whose bytes are read only for the rows that need them (ties, duplicate
    candidates); row i is chunk row ``rows[i]`` (None: row i)."""

    fp: UIntArray
    chunks: pa.ChunkedArray
    rows: IntArray | None = None

    @property
    def size(self) -> int:
        return int(self.fp.size)

    def take(self, rows: IntArray) -> RowIds:
        return RowIds(self.fp[rows], self.chunks, rows if self.rows is None else self.rows[rows])

    def keys(self, rows: npt.NDArray[np.integer[Any]]) -> IdKeys:
        """The ``IdKeys`` of ``rows``, from their bytes."""
        at = rows if self.rows is None else self.rows[rows]
        return id_keys(self.chunks.take(pa.array(at, pa.int64())).combine_chunks())


Ids = IdKeys | RowIds


def _bits(n: int) -> int:
    return max(int(n).bit_length(), 1)


def _pack(group: npt.NDArray[np.integer[Any]], fp: UIntArray, n_groups: int) -> IntArray:
    """(group, top bits of fp) packed into one non-negative int64, group in the high bits."""
    shift = 63 - _bits(n_groups)
    if shift < 16:
        raise ValueError(f"too many groups to pack with a fingerprint: {n_groups}")
    key = (fp >> np.uint64(64 - shift)).view(np.int64)
    key |= np.left_shift(group, shift, dtype=np.int64)
    return key


# --------------------------------------------------------------------------- judgments


@dataclass(frozen=True, slots=True)
class JudgmentIndex:
    """Unique judgments of one judgment set, ready to join, hashed on ``key`` = (query code,
    fingerprint) packed: bucket b = (key * _SEED mod 2^64) >> (64 - bits) holds the rows
    ``start[b]`` .. ``start[b + 1] - 1`` (rows sorted by bucket, then key; buckets number 2 to 4
    times the rows, so a lookup reads about one row; ``multi`` marks the buckets of several).
    ``query``, ``grade`` and ``docs`` row-aligned; ``ambiguous`` the keys two different
    documents share (almost always empty)."""

    key: IntArray
    query: IntArray
    grade: FloatArray
    docs: IdKeys
    n_queries: int
    ambiguous: frozenset[int]
    values: FloatArray  # the distinct grades, ascending, then 0.0 (what code -1 reads)
    code: npt.NDArray[np.signedinteger[Any]]  # grade = values[code]
    start: npt.NDArray[np.int32]
    bits: int
    multi: npt.NDArray[np.bool_]  # buckets of two or more rows

    def grades(self, code: npt.NDArray[np.signedinteger[Any]]) -> FloatArray:
        """Grades of joined rows from their codes (-1, unjudged: 0)."""
        return np.asarray(self.values[code], dtype=np.float64)

    def find(self, key: IntArray) -> tuple[IntArray, IntArray]:
        """The keys found: their places in ``key`` and the first row holding each."""
        b = _bucket(key, self.bits)
        lo = np.take(self.start, b).astype(np.int64)  # int64: faster to index with
        # an empty bucket's start is a row of another bucket (clipped: the last row), so
        # another key: the first row needs no test of the bucket's size
        hit = np.take(self.key, lo, mode="clip") == key
        found = [np.flatnonzero(hit)]
        rows = [lo.take(found[0])]
        more = np.flatnonzero(np.take(self.multi, b))  # the few buckets of two or more rows
        more = more.take(np.flatnonzero(~hit.take(more)))
        n = np.take(self.start, b.take(more) + 1) - lo.take(more)
        del b
        k = 1
        while more.size:
            at = lo.take(more) + k
            same = self.key.take(at) == key.take(more)
            found.append(more.take(np.flatnonzero(same)))
            rows.append(at.take(np.flatnonzero(same)))
            k += 1
            left = np.flatnonzero(~same & (n > k))
            more, n = more.take(left), n.take(left)
        if len(found) == 1:
            return found[0], rows[0]
        return np.concatenate(found), np.concatenate(rows)


def _bucket(key: IntArray, bits: int) -> npt.NDArray[np.int64]:
    """The hash bucket of each key: the top ``bits`` bits of key * _SEED (mod 2^64)."""
    h = key.view(np.uint64) * _SEED
    h >>= np.uint64(64 - bits)
    return h.view(np.int64)


@dataclass(frozen=True, slots=True)
class Conflict:
    """One (query, document) judged twice with different grades (rows into the input)."""

    query: int
    row: int
    grades: tuple[float, float]


def index_judgments(
    query: IntArray, docs: IdKeys, grade: FloatArray, n_queries: int
) -> JudgmentIndex | Conflict:
    """Merge duplicate judgments (same grade) and index them; a conflicting pair is returned
    (the caller names it) rather than raised."""
    key = _pack(query, docs.fp, n_queries)
    order = np.lexsort((grade, key))
    key = key[order]  # sorted; the rows are gathered once, at the end
    keep = np.ones(key.size, dtype=bool)
    ambiguous: set[int] = set()

    def conflict(i: int, j: int) -> Conflict:  # input rows i, j: one document, two grades
        lo, hi = sorted((float(grade[i]), float(grade[j])))
        return Conflict(int(query[i]), i, (lo, hi))

    if key.size > 1:
        same_key = np.flatnonzero(key[1:] == key[:-1])
        if same_key.size:
            same_doc = docs.equal(order[same_key], docs, order[same_key + 1])
            dup = same_key[same_doc]
            clash = dup[grade[order[dup]] != grade[order[dup + 1]]]
            if clash.size:
                return conflict(int(order[clash[0]]), int(order[clash[0] + 1]))
            keep[dup + 1] = False
            others = same_key[~same_doc]
            if others.size:  # different documents under one key: resolve them exactly
                ambiguous.update(int(k) for k in key[others])
                # a document can still repeat inside an ambiguous run of keys
                for k in sorted(ambiguous):
                    rows = np.flatnonzero(key == k)
                    for a_i, a in enumerate(rows):
                        for b in rows[a_i + 1 :]:
                            if keep[b] and bool(docs.equal(order[[a]], docs, order[[b]])[0]):
                                if grade[order[a]] != grade[order[b]]:
                                    return conflict(int(order[a]), int(order[b]))
                                keep[b] = False
    if not keep.all():
        kept = np.flatnonzero(keep)
        key, order = key[kept], order[kept]
        del kept
    del keep
    bits = _bits(max(key.size - 1, 1)) + 1
    bucket = _bucket(key, bits)
    by_bucket = np.argsort(bucket, kind="stable")  # keys stay sorted within a bucket
    start = np.zeros((1 << bits) + 1, dtype=np.int32)
    np.cumsum(np.bincount(bucket, minlength=1 << bits), out=start[1:])
    del bucket
    key, rows = key[by_bucket], order[by_bucket]
    del by_bucket, order
    g = grade[rows]
    values, code = np.unique(g, return_inverse=True)
    dtype = np.int16 if values.size < 2**15 else np.int32
    return JudgmentIndex(
        key,
        query[rows],
        g,
        docs.take(rows),
        n_queries,
        frozenset(ambiguous),
        np.append(values, 0.0),
        code.ravel().astype(dtype),
        start,
        bits,
        np.diff(start) > 1,
    )


def join(
    index: JudgmentIndex, query: npt.NDArray[np.integer[Any]], docs: IdKeys
) -> npt.NDArray[np.signedinteger[Any]]:
    """The grade code (``index.values[code]`` is the grade; -1: unjudged) of each (query,
    document) row; ``query`` is the judged-query code, negative for a query without
    judgments."""
    n = query.size
    out = np.full(n, -1, dtype=index.code.dtype)
    if n == 0 or index.key.size == 0:
        return out
    if int(query.min()) >= 0:  # every query has judgments: no row selection
        key = _pack(query, docs.fp, index.n_queries)
        rows = None
    else:
        rows = np.flatnonzero(query >= 0)
        key = _pack(query[rows], docs.fp[rows], index.n_queries)
    found, pos = index.find(key)
    rows = found if rows is None else rows.take(found)
    ok = docs.equal(rows, index.docs, pos)
    if index.ambiguous:
        key = key.take(found)
        for i in np.flatnonzero(np.isin(key, np.fromiter(index.ambiguous, np.int64))):
            ok[i] = False
            b = int(_bucket(key[i : i + 1], index.bits)[0])
            lo, hi = int(index.start[b]), int(index.start[b + 1])
            candidates = lo + np.flatnonzero(index.key[lo:hi] == key[i])
            same = docs.equal(np.full(candidates.size, rows[i]), index.docs, candidates)
            if same.any():
                ok[i] = True
                pos[i] = candidates[int(np.argmax(same))]
    if not ok.all():
        keep = np.flatnonzero(ok)
        rows, pos = rows.take(keep), pos.take(keep)
    out[rows] = index.code.take(pos)
    return out


# --------------------------------------------------------------------------- placement


def _ordinal(x: FloatArray) -> tuple[IntArray, int]:
    """Order-preserving codes of ``x`` (NaN last, equal values equal codes) and their count.
    An infinite rank or score is a value (a score of +inf first, as trec_eval and the sorted
    rows' fast path order it), not a missing one: it once went last here and first there, so
    one list scored differently by the order of its lines."""
    if x.size == 0:
        return np.zeros(0, dtype=np.int64), 1
    if bool(np.isfinite(x).all()):
        codes, n, _ = ordinal_codes(x, keep_values=False)
        return codes, n + 1  # the last code is free for NaN
    missing = np.isnan(x)
    uniq, inverse = np.unique(x[~missing], return_inverse=True)
    codes = np.empty(x.size, dtype=np.int64)
    codes[~missing] = inverse.ravel()
    nan_code = int(uniq.size)
    codes[missing] = nan_code
    return codes, nan_code + 1


def _already_placed(row_list: IntArray, rank: FloatArray | None, score: FloatArray | None) -> bool:
    """Whether consecutive rows are in placement order with no ties: each row starts a new
    list or comes strictly after the previous one (rank up, or equal rank and score down).
    NaN compares false, so rows with a missing rank or score take the sorting path."""
    step = np.diff(row_list)
    if bool(np.any(step < 0)):
        return False
    first = rank if rank is not None else score
    assert first is not None
    after = first[1:] > first[:-1] if rank is not None else first[1:] < first[:-1]
    after |= step > 0
    if after.all():
        return True
    if rank is None or score is None:
        return False
    at = np.flatnonzero(~after)  # equal ranks in one list: the score must go down
    return bool(np.all((rank[at + 1] == rank[at]) & (score[at + 1] < score[at])))


def _all_nan(x: FloatArray) -> bool:
    return x.size == 0 or (bool(np.isnan(x[0])) and bool(np.isnan(x).all()))


def placement(
    row_list: IntArray,
    n_lists: int,
    rank: FloatArray | None,
    score: FloatArray | None,
    docs: Ids,
) -> IntArray | None:
    """The row order that places each list best first (see the module docstring), or None when
    the rows already are in that order with no ties."""
    n = row_list.size
    if n == 0:  # an empty window: nothing to place (its columns are empty, not missing)
        return None
    # all NaN (a column no file had): a finite first value settles it without a pass
    if rank is not None and _all_nan(rank):
        rank = None
    if score is not None and _all_nan(score):
        score = None
    if rank is None and score is None:
        raise ValueError("rows need a rank or a score to be placed")
    if n < 2 or _already_placed(row_list, rank, score):
        return None
    parts: list[tuple[IntArray, int]] = [(row_list, max(n_lists, 1))]
    if rank is not None:
        parts.append(_ordinal(rank))
    if score is not None:
        codes, size = _ordinal(score)
        nan_code = size - 1
        desc = (size - 2) - codes  # descending; NaN (the last code) stays last
        desc[codes == nan_code] = nan_code
        parts.append((desc, size))
    bits = sum(_bits(size) for _, size in parts)
    if bits <= 62:
        key = parts[0][0].astype(np.int64)
        for codes, size in parts[1:]:
            key <<= _bits(size)
            key |= codes
        order = np.argsort(key)
        sorted_key = key[order]
    else:
        order = np.lexsort(tuple(codes for codes, _ in reversed(parts)))
        stacked = np.stack([codes[order] for codes, _ in parts])
        same_next = np.all(stacked[:, 1:] == stacked[:, :-1], axis=0)
        sorted_key = np.cumsum(np.concatenate(([0], ~same_next)))
    tied = np.zeros(n, dtype=bool)
    eq = sorted_key[1:] == sorted_key[:-1]
    tied[1:] |= eq
    tied[:-1] |= eq
    if tied.any():  # ties: document id descending (byte order; a prefix is smaller)
        at = np.flatnonzero(tied)
        rows = order[at]
        group = sorted_key[at]
        tied_ids = docs.keys(rows)
        if tied_ids.long:  # ids past the words kept: by their whole bytes
            ranked = sorted(range(rows.size), key=tied_ids.raw, reverse=True)
            ranked.sort(key=lambda i: int(group[i]))  # stable: bytes descending in a group
            order[at] = rows[np.asarray(ranked, dtype=np.int64)]
        else:
            be = tied_ids.words.byteswap()
            keys: list[npt.NDArray[np.generic]] = [-tied_ids.length]
            keys += [~be[j] for j in range(be.shape[0] - 1, -1, -1)]
            keys.append(group)
            order[at] = rows[np.lexsort(tuple(keys))]
    return order


def duplicates(row_list: IntArray, n_lists: int, docs: Ids) -> BoolArray | None:
    """Rows (in placement order) that repeat an earlier row's document in the same list, or
    None when there are none."""
    n = row_list.size
    if n < 2:
        return None
    key = _pack(row_list, docs.fp, n_lists)
    # only whether two keys are equal counts here, not their order among equals: numpy's SIMD
    # quicksort (measured on 1M keys in 100-row lists, Zen 4: 9.4 ms with the AVX2 kernels the
    # monitor command picks there, against timsort's 15.7 ms, which exploits the lists' ascending
    # order; with numpy's AVX-512 kernels on Zen 4 quicksort takes 49-61 ms: monitor.cpu)
    key.sort()
    if not bool(np.any(key[1:] == key[:-1])):
        return None  # equal documents have equal keys: no equal keys, no duplicates
    key = _pack(row_list, docs.fp, n_lists)
    order = np.argsort(key, kind="stable")  # equal keys keep placement order: best first
    ks = key[order]
    later = np.flatnonzero(ks[1:] == ks[:-1]) + 1
    drop = np.zeros(n, dtype=bool)
    # a later row of a run of equal keys duplicates the run's first row, if the bytes agree
    run_first = np.maximum.accumulate(
        np.where(np.concatenate(([True], ks[1:] != ks[:-1])), np.arange(n), 0)
    )
    a, b = order[run_first[later]], order[later]
    ids_a, ids_b = docs.keys(a), docs.keys(b)
    every = np.arange(a.size)
    same = ids_b.equal(every, ids_a, every)
    drop[b[same]] = True
    for i in np.flatnonzero(~same):  # a fingerprint collision inside a list: compare exactly
        row = b[i]
        run = order[run_first[later[i]] : later[i]]
        kept = run[~drop[run]]
        one, others = docs.keys(np.array([row])), docs.keys(kept)
        if one.equal(np.zeros(kept.size, np.int64), others, np.arange(kept.size)).any():
            drop[row] = True
    return drop if drop.any() else None
