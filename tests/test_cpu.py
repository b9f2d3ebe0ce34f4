"""monitor.cpu: numpy's AVX2 kernels on AMD Zen 4, chosen before numpy loads."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from monitor import cpu

ROOT = Path(__file__).resolve().parents[1]


def _block(vendor: str, family: int, flags: str, model: str = "AMD EPYC") -> str:
    return (
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: 17\n"
        f"model name\t: {model}\nflags\t\t: {flags}\n"
    )


ZEN4 = _block("AuthenticAMD", 25, "fpu sse2 avx2 avx512f avx512dq avx512bw")
ZEN3 = _block("AuthenticAMD", 25, "fpu sse2 avx2 bmi2")  # family 0x19 too, no AVX-512
ZEN5 = _block("AuthenticAMD", 26, "fpu sse2 avx2 avx512f avx512dq")  # family 0x1a
INTEL = _block("GenuineIntel", 6, "fpu sse2 avx2 avx512f avx512dq", "Intel Xeon")


def test_cpuinfo_reads_the_first_processor_block() -> None:
    text = ZEN4 + "\n" + _block("GenuineIntel", 6, "fpu", "another")
    info = cpu.cpuinfo(text, modalias=INTEL_ALIAS)  # /proc/cpuinfo wins when it says
    assert info["vendor_id"] == "AuthenticAMD"
    assert info["cpu family"] == "25"
    assert info["model name"] == "AMD EPYC"
    assert info["flags"] == "fpu sse2 avx2 avx512f avx512dq avx512bw"
    assert cpu.cpuinfo("", modalias="") == {}


def _alias(vendor: int, family: int, model: int, features: list[int]) -> str:
    listed = "".join(f",{f:04X}" for f in features)
    return f"cpu:type:x86,ven{vendor:04X}fam{family:04X}mod{model:04X}:feature:{listed}\n"


AVX512F = 9 * 32 + 16  # X86_FEATURE_AVX512F
ZEN4_ALIAS = _alias(2, 0x19, 0x11, [0, 1, 0x9C, AVX512F, AVX512F + 1])
ZEN3_ALIAS = _alias(2, 0x19, 0x01, [0, 1, 0x9C])
INTEL_ALIAS = _alias(0, 6, 0x8F, [0, 1, AVX512F])


@pytest.mark.parametrize(
    ("alias", "expected"),
    [(ZEN4_ALIAS, True), (ZEN3_ALIAS, False), (INTEL_ALIAS, False), ("cpu:type:arm64\n", False)],
)
def test_a_hidden_proc_cpuinfo_is_read_from_the_cpu_modalias(alias: str, expected: bool) -> None:
    """systemd's ProcSubset=pid hides /proc/cpuinfo; the modalias in /sys says the same."""
    info = cpu.cpuinfo("", modalias=alias)
    assert cpu.zen4(info) is expected
    if alias.startswith("cpu:type:x86"):
        assert info["vendor_id"] in ("AuthenticAMD", "GenuineIntel")
        family = alias.split("fam", 1)[1][:4]
        assert info["cpu family"] == str(int(family, 16))


def test_the_modalias_format_is_the_kernel_s() -> None:
    """The parser reads this machine's modalias as /proc/cpuinfo describes the same CPU."""
    try:
        alias = Path(cpu.MODALIAS).read_text()
        proc = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no CPU modalias or /proc/cpuinfo here")
    if not alias.startswith("cpu:type:x86"):
        pytest.skip("not an x86 modalias")
    seen, told = cpu.cpuinfo("", modalias=alias), cpu.cpuinfo(proc)
    assert seen["vendor_id"] == told["vendor_id"]
    assert seen["cpu family"] == told["cpu family"]
    assert seen["model"] == told["model"]
    assert ("avx512f" in seen["flags"]) == ("avx512f" in told["flags"].split())
    assert cpu.zen4(seen) == cpu.zen4(told)


@pytest.mark.parametrize(
    ("text", "expected"), [(ZEN4, True), (ZEN3, False), (ZEN5, False), (INTEL, False), ("", False)]
)
def test_zen4_is_amd_family_0x19_with_avx512(text: str, expected: bool) -> None:
    assert cpu.zen4(cpu.cpuinfo(text, modalias="")) is expected


@pytest.mark.parametrize(
    ("environ", "text", "version", "expected"),
    [
        ({}, ZEN4, "2.4.6", cpu.AVX512_GROUPS),
        ({}, ZEN4, "2.4.0rc1", cpu.AVX512_GROUPS),
        ({}, ZEN4, "2.5.0rc1", cpu.AVX512_GROUPS),
        ({}, ZEN4, "2.10.0", cpu.AVX512_GROUPS),
        ({}, ZEN4, "3.0.0.dev0", cpu.AVX512_GROUPS),
        ({"NPY_ENABLE_CPU_FEATURES": ""}, ZEN4, "2.4.6", cpu.AVX512_GROUPS),
        # numpy refuses to load with both variables set: an enable list is a choice too
        ({"NPY_ENABLE_CPU_FEATURES": "X86_V2 X86_V3"}, ZEN4, "2.4.6", None),
        # the operator's choice stands, an empty one too
        ({"NPY_DISABLE_CPU_FEATURES": ""}, ZEN4, "2.4.6", None),
        ({"NPY_DISABLE_CPU_FEATURES": "X86_V3"}, ZEN4, "2.4.6", None),
        # numpy before 2.4 names its AVX-512 groups otherwise: left alone
        ({}, ZEN4, "2.3.5", None),
        ({}, ZEN4, "1.26.4", None),
        ({}, ZEN4, "2.3rc1", None),
        ({}, ZEN4, "not a version", None),
        ({}, ZEN4, None, None),  # an empty dist-info's metadata has no version
        # other processors keep numpy's choice
        ({}, ZEN3, "2.4.6", None),
        ({}, ZEN5, "2.4.6", None),
        ({}, INTEL, "2.4.6", None),
        ({}, "", "2.4.6", None),
    ],
)
def test_avx2_choice(
    environ: dict[str, str], text: str, version: str, expected: str | None
) -> None:
    assert cpu.avx2_choice(environ, cpu.cpuinfo(text, modalias=""), version) == expected


def _child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # an ImportWarning from numpy means it does not know a name we gave it
        [sys.executable, "-W", "error::ImportWarning", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.skipif(
    cpu.avx2_choice({}, cpu.cpuinfo(ZEN4), np.__version__) is None
    or platform.machine().lower() not in ("x86_64", "amd64"),
    reason="numpy before 2.4, or not x86: monitor.cpu leaves it alone",
)
def test_the_groups_are_numpy_s_dispatched_ones() -> None:
    """numpy accepts every name set on Zen 4 (it warns on a name it does not dispatch), and
    its AVX-512 groups are then off: checked on this machine whatever its processor."""
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": cpu.AVX512_GROUPS}
    code = (
        "import json, numpy\n"
        "from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__\n"
        "print(json.dumps({'dispatch': list(__cpu_dispatch__),"
        " 'on': [k for k in __cpu_dispatch__ if __cpu_features__.get(k)]}))\n"
    )
    out = _child(code, env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    groups = cpu.AVX512_GROUPS.split()
    assert set(groups) <= set(doc["dispatch"])
    # no AVX-512 target of this numpy stays on (a new one would need adding to the groups)
    assert not [k for k in doc["on"] if k == "X86_V4" or k.startswith("AVX512")]


def test_the_entry_point_sets_it_before_numpy_loads_and_never_over_the_operator() -> None:
    """``monitor.entry`` imports nothing that imports numpy before choosing; a value the
    operator set is what numpy sees."""
    code = (
        "import sys, monitor.entry\n"
        "assert 'numpy' not in sys.modules, 'numpy loaded before the choice'\n"
        "from monitor import cpu\n"
        "import json\n"
        "print(json.dumps([cpu.prefer_avx2(), cpu.chosen]))\n"
    )
    mine = {**os.environ, "NPY_DISABLE_CPU_FEATURES": ""}
    out = _child(code, mine)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [None, None]
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    out = _child(code, env)
    assert out.returncode == 0, out.stderr
    expected = cpu.avx2_choice(env, cpu.cpuinfo(), np.__version__)
    assert json.loads(out.stdout) == [expected] * 2
    # after numpy is imported, nothing is set
    late = _child("import numpy\nfrom monitor import cpu\nprint(cpu.prefer_avx2())\n", env)
    assert late.stdout.strip() == "None", late.stderr


def test_the_daemon_logs_the_choice(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from monitor.cli import _log_numpy_kernels

    monkeypatch.setattr(cpu, "chosen", None)
    monkeypatch.setattr(cpu, "problem", None)
    with caplog.at_level("INFO", logger="monitor"):
        _log_numpy_kernels()
    assert not caplog.records
    monkeypatch.setattr(cpu, "chosen", cpu.AVX512_GROUPS)
    with caplog.at_level("INFO", logger="monitor"):
        _log_numpy_kernels()
    (record,) = caplog.records
    assert record.getMessage() == "numpy's AVX-512 kernels off"
    assert record.__dict__["NPY_DISABLE_CPU_FEATURES"] == cpu.AVX512_GROUPS
    assert "Zen 4" in record.__dict__["reason"]
    caplog.clear()
    monkeypatch.setattr(cpu, "chosen", None)
    monkeypatch.setattr(cpu, "problem", "OSError: unreadable dist-info")
    with caplog.at_level("INFO", logger="monitor"):
        _log_numpy_kernels()
    (warned,) = caplog.records
    assert warned.levelname == "WARNING"
    assert warned.getMessage() == "numpy's kernels left as numpy chose them: could not decide"
    assert warned.__dict__["error"] == "OSError: unreadable dist-info"


@pytest.mark.parametrize("failure", ["none", "raises"])
def test_no_failure_to_decide_stops_the_command(
    monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """An unreadable numpy version (an empty dist-info first on the path) or any error while
    deciding leaves numpy as it is, with the reason kept for the start-up log."""
    monkeypatch.delitem(sys.modules, "numpy")  # restored after the test
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    monkeypatch.delenv("NPY_ENABLE_CPU_FEATURES", raising=False)
    monkeypatch.setattr(cpu, "cpuinfo", lambda: cpu.__dict__["_from_modalias"](ZEN4_ALIAS))
    monkeypatch.setattr(cpu, "problem", None)
    monkeypatch.setattr(cpu, "chosen", None)

    def version(name: str) -> str | None:
        if failure == "raises":
            raise OSError("unreadable dist-info")
        return None

    monkeypatch.setattr(metadata, "version", version)
    assert cpu.prefer_avx2() is None
    assert "NPY_DISABLE_CPU_FEATURES" not in os.environ
    assert cpu.chosen is None
    assert (cpu.problem is not None) == (failure == "raises")
    if failure == "raises":
        assert cpu.problem == "OSError: unreadable dist-info"


def test_a_numpy_that_refuses_the_variable_starts_again_without_it() -> None:
    """numpy refuses to load when told to disable a group of its baseline (an AVX-512 baseline
    build on a Zen 4 refuses X86_V4), and a failed import cannot be retried in one process: the
    command once died at start. Here a baseline group (X86_V2, in the x86_64 wheels' baseline)
    stands in for the AVX-512 ones; the command starts again with the variable empty."""
    if platform.machine() != "x86_64":
        pytest.skip("X86_V2 is an x86_64 group")
    code = (
        "import os\n"
        "from monitor import cpu\n"
        "cpu.cpuinfo = lambda: {}\n"
        "cpu.zen4 = lambda info: True\n"
        "cpu.AVX512_GROUPS = 'X86_V2'\n"
        "print(repr(cpu.prefer_avx2()), repr(os.environ.get(cpu.VARIABLE)), flush=True)\n"
        "import numpy\n"
        "print(int(numpy.add(1, 2)))\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")
    }
    out = _child(code, env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["None ''", "3"], out.stdout
