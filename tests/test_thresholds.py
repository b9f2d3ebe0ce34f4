"""The alarm thresholds' persistent cache (``monitor.thresholds``): exact, versioned, optional."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor import thresholds
from monitor.stats import _dist, sequential
from monitor.thresholds import load_thresholds, save_thresholds
from monitor.verdict import plan


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty threshold table and cold lru caches (restored afterwards)."""
    monkeypatch.setattr(plan, "_THRESHOLDS", {})
    plan._cusum_h.cache_clear()
    plan._shewhart_z.cache_clear()
    yield
    plan._cusum_h.cache_clear()
    plan._shewhart_z.cache_clear()


def _search(rho: float = 0.04) -> tuple[float, float]:
    return plan._cusum_h(720, 0.02, 0.5, rho, 1), plan._shewhart_z(720, 0.005, rho, 1)


def test_saved_thresholds_are_the_searched_ones(fresh: None, tmp_path: Path) -> None:
    searched = _search()
    assert save_thresholds(tmp_path, known=0) == 2
    doc = json.loads((tmp_path / "cache" / "thresholds.json").read_text())
    assert doc["format"] == 4
    assert set(doc["versions"]) == {
        "monitor",
        "code",
        "numpy",
        "scipy",
        "cpu",
        "blas_threads",
        "numpy_kernels",
        "cpus",
    }
    saved = {k: float.fromhex(v) for k, v in doc["thresholds"].items()}
    assert sorted(saved.values()) == sorted(searched)
    plan._THRESHOLDS.clear()
    plan._cusum_h.cache_clear()
    plan._shewhart_z.cache_clear()
    assert load_thresholds(tmp_path) == 2
    assert plan.known_thresholds() == saved  # handed to the alarm plan
    assert _search() == searched  # bit for bit
    assert save_thresholds(tmp_path, known=2) == 2  # nothing new: not rewritten
    # and used without a search: a file whose values were changed gives the changed values
    doc["thresholds"] = {k: (v + 1.0).hex() for k, v in saved.items()}
    (tmp_path / "cache" / "thresholds.json").write_text(json.dumps(doc))
    plan._THRESHOLDS.clear()
    plan._cusum_h.cache_clear()
    plan._shewhart_z.cache_clear()
    assert load_thresholds(tmp_path) == 2
    assert _search() == (searched[0] + 1.0, searched[1] + 1.0)


def test_a_remembered_threshold_is_used_instead_of_a_search(fresh: None) -> None:
    key = plan.threshold_key("shewhart", 720, 0.004, 0.5, 1)
    plan.remember_thresholds({key: 3.25})
    assert plan._shewhart_z(720, 0.004, 0.5, 1) == 3.25


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        '{"format": 3, "versions": {}, "thresholds": {}}',
        '{"format": 2, "versions": {"monitor": "0"}, "thresholds": {"a": "0x1p+1"}}',
        # format 1's CUSUM thresholds came from the geometric run-length form: stale
        '{"format": 1, "versions": {}, "thresholds": {"a": "0x1p+1"}}',
        "[1, 2]",
    ],
)
def test_a_foreign_or_broken_file_is_ignored(fresh: None, tmp_path: Path, text: str) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "thresholds.json").write_text(text)
    assert load_thresholds(tmp_path) == 0
    assert plan.known_thresholds() == {}


def test_nothing_is_written_without_a_state_dir(fresh: None, tmp_path: Path) -> None:
    _search()
    missing = tmp_path / "no-such-dir"
    assert save_thresholds(missing, known=0) == 0
    assert not missing.exists()


def test_an_unwritable_cache_never_fails(fresh: None, tmp_path: Path) -> None:
    _search()
    (tmp_path / "cache").write_text("a file where the directory should be")
    assert save_thresholds(tmp_path, known=0) == 0


def test_a_damaged_cache_in_any_form_is_ignored(fresh: None, tmp_path: Path) -> None:
    """A deep nesting (RecursionError, once a crash at start-up), a FIFO (once a start-up that
    waited for a writer, before its HTTP server) or a directory where the file belongs is
    ignored as any damaged cache is: the thresholds are searched again. In a thread joined
    with a bound, so a regression fails here instead of hanging the suite."""
    import os
    import threading

    path = tmp_path / "cache" / "thresholds.json"
    path.parent.mkdir()

    def loaded() -> int:
        out: list[int] = []
        t = threading.Thread(target=lambda: out.append(load_thresholds(tmp_path)), daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "load_thresholds blocked"
        return out[0]

    path.write_text("[" * 200_000)
    assert loaded() == 0
    path.unlink()
    os.mkfifo(path)
    assert loaded() == 0
    path.unlink()
    path.mkdir()
    assert loaded() == 0


def test_other_blas_threads_do_not_use_the_file(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The solves' last bits depend on the BLAS threads: another setting searches again."""
    _search()
    save_thresholds(tmp_path, known=0)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert load_thresholds(tmp_path) == 0


def test_a_change_to_the_thresholds_code_does_not_use_the_file(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A threshold's last bits follow the code that computes it (475d88b moved some by an ulp
    with the version unchanged): a file written by other code searches again."""
    _search()
    save_thresholds(tmp_path, known=0)
    assert load_thresholds(tmp_path) > 0
    source = Path(sequential.__file__).read_bytes()
    assert thresholds.code_digest() == _digest_of(source)
    monkeypatch.setattr(thresholds, "code_digest", lambda: _digest_of(source + b"# changed"))
    assert load_thresholds(tmp_path) == 0


@pytest.mark.parametrize("packed", [False, True], ids=["files", "zip"])
def test_the_code_digest_is_the_imported_codes(tmp_path: Path, packed: bool) -> None:
    """Taken at import: a process whose package is upgraded on disk before its first save
    stamps its thresholds with the code it ran, not the new files'. In a zip import too (read
    through the loader; the files' paths cannot be opened there)."""
    package = Path(thresholds.__file__).parent
    shutil.copytree(package, tmp_path / "monitor", ignore=shutil.ignore_patterns("__pycache__"))
    path = tmp_path
    if packed:
        path = tmp_path / "monitor.zip"
        with zipfile.ZipFile(path, "w") as z:
            for f in sorted((tmp_path / "monitor").rglob("*.py")):
                z.write(f, f.relative_to(tmp_path).as_posix())
    code = (
        "import sys; from pathlib import Path\n"
        "from monitor import thresholds as t\n"
        "print(t.__file__, t.code_digest())\n"
        "s = Path(sys.argv[1]); s.write_bytes(s.read_bytes() + b'# upgraded')\n"
        "print(t.code_digest(), t._code_digest())\n"
    )
    out = subprocess.run(
        # -P: not the working directory's package first (the repository's, under pytest)
        [sys.executable, "-P", "-c", code, str(tmp_path / "monitor" / "stats" / "sequential.py")],
        env={**os.environ, "PYTHONPATH": str(path)},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    assert out[0].startswith(str(path))  # the copy's code ran
    source = (tmp_path / "monitor" / "stats" / "sequential.py").read_bytes()
    before = _digest_of(source.removesuffix(b"# upgraded"))
    assert out[1] == out[2] == before  # the imported code's, kept
    # read again, the files' (a zip holds what it held: the digest of the code inside it)
    assert out[3] == (before if packed else _digest_of(source))


def _digest_of(sequential_source: bytes) -> str:
    """``code_digest`` as computed, with ``sequential_source`` for monitor/stats/sequential.py."""
    digest = hashlib.sha256()
    for source in (
        sequential_source,
        Path(_dist.__file__).read_bytes(),
        Path(plan.__file__).read_bytes(),
    ):
        digest.update(source + b"\0")
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("name", "value", "kept"),
    [
        ("NPY_DISABLE_CPU_FEATURES", "X86_V4 AVX512_ICL AVX512_SPR", False),
        ("NPY_ENABLE_CPU_FEATURES", "X86_V2 X86_V3", False),
        ("NPY_DISABLE_CPU_FEATURES", "", True),  # empty chooses what unset chooses
    ],
)
def test_other_numpy_kernels_do_not_use_the_file(
    fresh: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    value: str,
    kept: bool,
) -> None:
    """numpy's loops (NPY_DISABLE_CPU_FEATURES, set by monitor.cpu on Zen 4) move last bits:
    a file written under another setting searches again."""
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    monkeypatch.delenv("NPY_ENABLE_CPU_FEATURES", raising=False)
    _search()
    save_thresholds(tmp_path, known=0)
    assert load_thresholds(tmp_path) > 0
    monkeypatch.setenv(name, value)
    assert (load_thresholds(tmp_path) > 0) is kept


def test_a_failed_write_leaves_no_new_directory(
    fresh: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full state_dir (the write fails) holds what it held: no temp file, no empty cache/."""
    import monitor.thresholds as thresholds

    def full(directory: Path, target: Path, data: str, *, stem: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        raise OSError(28, "No space left on device")

    _search()
    monkeypatch.setattr(thresholds, "atomic_write", full)
    assert save_thresholds(tmp_path, known=0) == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "value",
    # "0x1p+99999": past float's range, an OverflowError from float.fromhex (it ended the
    # load, and `monitor check` with it)
    [float("nan").hex(), float("-inf").hex(), float("inf").hex(), (-1.0).hex(), "0x1p+99999"],
)
def test_a_threshold_that_is_no_threshold_is_never_trusted(
    fresh: None, tmp_path: Path, value: str
) -> None:
    """A cache file of matching versions whose value is NaN silenced every CUSUM alarm
    (S > nan is never true), and -inf raised one at every block: the file is ignored and
    the thresholds searched again."""
    searched = _search()
    save_thresholds(tmp_path, known=0)
    path = tmp_path / "cache" / "thresholds.json"
    doc = json.loads(path.read_text())
    first = sorted(doc["thresholds"])[0]
    doc["thresholds"][first] = value
    path.write_text(json.dumps(doc))
    plan._THRESHOLDS.clear()
    plan._cusum_h.cache_clear()
    plan._shewhart_z.cache_clear()
    assert load_thresholds(tmp_path) == 0
    assert _search() == searched
