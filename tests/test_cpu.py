"""monitor.cpu: numpy's AVX2 kernels on AMD Zen 4, chosen before numpy loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    info = cpu.cpuinfo(text)
    assert info["vendor_id"] == "AuthenticAMD"
    assert info["cpu family"] == "25"
    assert info["model name"] == "AMD EPYC"
    assert cpu.processor(info)[1] == "avx2 avx512bw avx512dq avx512f fpu sse2"
    assert cpu.cpuinfo("") == {}


@pytest.mark.parametrize(
    ("text", "expected"), [(ZEN4, True), (ZEN3, False), (ZEN5, False), (INTEL, False), ("", False)]
)
def test_zen4_is_amd_family_0x19_with_avx512(text: str, expected: bool) -> None:
    assert cpu.zen4(cpu.cpuinfo(text)) is expected


@pytest.mark.parametrize(
    ("environ", "text", "version", "expected"),
    [
        ({}, ZEN4, "2.4.6", cpu.AVX512_GROUPS),
        ({}, ZEN4, "2.5.0rc1", cpu.AVX512_GROUPS),
        ({}, ZEN4, "3.0.0", cpu.AVX512_GROUPS),
        # the operator's choice stands, an empty one too
        ({"NPY_DISABLE_CPU_FEATURES": ""}, ZEN4, "2.4.6", None),
        ({"NPY_DISABLE_CPU_FEATURES": "X86_V3"}, ZEN4, "2.4.6", None),
        # numpy before 2.4 names its AVX-512 groups otherwise: left alone
        ({}, ZEN4, "2.3.5", None),
        ({}, ZEN4, "1.26.4", None),
        ({}, ZEN4, "not a version", None),
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
    assert cpu.avx2_choice(environ, cpu.cpuinfo(text), version) == expected


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
    cpu.avx2_choice({}, cpu.cpuinfo(ZEN4), np.__version__) is None,
    reason="numpy before 2.4: monitor.cpu leaves it alone",
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
    assert not set(groups) & set(doc["on"])


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
