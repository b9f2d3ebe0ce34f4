"""Arrow arrays to numpy without pandas (``monitor.sources.footers``): ``to_numpy``'s values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from monitor.sources.footers import _numbers, _strings, _valid

NUMERIC = ["float64", "float32", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint8"]


@pytest.mark.parametrize("kind", NUMERIC)
@pytest.mark.parametrize("cut", [(0, None), (3, 7), (5, 0)])
def test_numbers_are_to_numpys_values(kind: str, cut: tuple[int, int | None]) -> None:
    arr = pa.array(np.arange(20) % 7, type=getattr(pa, kind)()).slice(*cut)
    got, want = _numbers(arr), arr.to_numpy(zero_copy_only=False)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


def test_numbers_with_nulls_or_other_types_go_through_to_numpy() -> None:
    with_nulls = pa.array([1.5, None, 3.0]).slice(1)
    assert np.array_equal(_numbers(with_nulls), [np.nan, 3.0], equal_nan=True)
    stamps = pa.array([1, 2], type=pa.timestamp("us"))
    assert np.array_equal(_numbers(stamps), stamps.to_numpy(zero_copy_only=False))


@pytest.mark.parametrize("cut", [(0, None), (1, 9), (3, 0)])
def test_valid_is_is_valid(cut: tuple[int, int | None]) -> None:
    values = [None if i % 3 == 0 else i for i in range(13)]
    for arr in (pa.array(values).slice(*cut), pa.array(range(13)).slice(*cut)):
        assert np.array_equal(_valid(arr), arr.is_valid().to_numpy(zero_copy_only=False))


@pytest.mark.parametrize("cut", [(0, None), (2, 5), (4, 0)])
def test_strings_are_to_numpys_where_valid(cut: tuple[int, int | None]) -> None:
    arr = pa.array(["q1", None, "q2", "q1", "", "é", None]).slice(*cut)
    got, want = _strings(arr), arr.to_numpy(zero_copy_only=False)
    valid = _valid(arr)
    assert got.dtype == object
    assert list(got[valid]) == list(want[valid])
    encoded = pa.array(["b", "a", "b"]).dictionary_encode()
    assert list(_strings(encoded)) == ["b", "a", "b"]


def test_reading_a_window_does_not_import_pandas(tmp_path: Path) -> None:
    from monitor.sources import write_parquet

    write_parquet(
        tmp_path / "part-0.parquet",
        {
            "timestamp": np.datetime64("2026-11-01T00:00", "us") + np.arange(5),
            "score": np.linspace(0, 1, 5),
        },
    )
    code = (
        "import sys\nfrom datetime import datetime, UTC\n"
        "from monitor.sources import ScoreSpec, Window, read_scores\n"
        f"w = read_scores(ScoreSpec({str(tmp_path)!r}), Window(datetime(2026, 11, 1, tzinfo=UTC),"
        " datetime(2026, 11, 2, tzinfo=UTC)), with_timestamps=True)\n"
        "print(w.values.size, 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["5", "False"]
