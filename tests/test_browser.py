"""The HTML pages in a real browser: headless Debian chromium loads the report file and a real
daemon's pages, and each test reads back the DOM chromium built (``--dump-dom``), the console
messages it logged (``--enable-logging=stderr``: a CSP violation, a blocked load or a script error
shows as a ``CONSOLE`` line) and a screenshot (not blank; the palette's blue and orange drawn).

Chromium comes from ``.ci/install-debian-packages.sh`` (``make test`` runs it first). Without it
the tests are skipped with that reason, except under CI (``CI`` set), where they fail.
``UPDATE_SCREENSHOTS=1`` copies one screenshot per page type into ``docs/``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from monitor.cli import main
from monitor.simulate import SCENARIOS, World, write_world
from tests.ci import missing
from tests.deploy.stack import wait_for
from tests.test_report import _json_value, parse

pytestmark = [pytest.mark.browser, pytest.mark.integration]

START = datetime(2026, 10, 1, tzinfo=UTC)
AT = START + timedelta(days=17)
REPLAY = (AT - timedelta(days=3)).isoformat()
DOCS = Path(__file__).resolve().parent.parent / "docs"
OKABE_BLUE = (0x00, 0x72, 0xB2)
CURRENT_ORANGE = (0xC7, 0x77, 0x00)  # Okabe-Ito's #E69F00 darkened to 3:1 contrast
_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        missing("chromium is not installed: run .ci/install-debian-packages.sh (make debs)")
    return path


@dataclass(frozen=True)
class Loaded:
    """What chromium made of one URL."""

    dom: str
    console: list[str]
    screenshot: Path


def load(url: str, tmp: Path, name: str, *, width: int = 1280, height: int = 2400) -> Loaded:
    """Load ``url`` twice in fresh profiles: once for the DOM, once for a screenshot."""
    exe = _chromium()
    shot = tmp / f"{name}.png"
    console: list[str] = []
    runs = (
        ["--dump-dom"],
        [f"--screenshot={shot}", f"--window-size={width},{height}"],
    )
    dom = ""
    for k, extra in enumerate(runs):
        profile = tmp / f"profile-{name}-{k}"
        proc = subprocess.run(
            [exe, *_FLAGS, f"--user-data-dir={profile}", *extra, url],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        console += [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
        if k == 0:
            dom = proc.stdout
    assert shot.stat().st_size > 0
    return Loaded(dom=dom, console=console, screenshot=shot)


def not_blank(png: Path) -> bool:
    """More than one colour on more than 1 % of the pixels besides the background."""
    with Image.open(png) as img:
        rgb = img.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 20) or []
    colours.sort(reverse=True)
    total = sum(c for c, _ in colours)
    return len(colours) > 10 and total - colours[0][0] > 0.01 * total


def palette_pixels(png: Path, colour: tuple[int, int, int]) -> int:
    """Pixels of exactly ``colour`` (chart fills are flat)."""
    with Image.open(png) as img:
        counts = {c: n for n, c in (img.convert("RGB").getcolors(maxcolors=1 << 20) or [])}
    return counts.get(colour, 0)


def _keep(loaded: Loaded, name: str) -> None:
    if os.environ.get("UPDATE_SCREENSHOTS"):  # a 96-colour palette keeps docs/ small
        with Image.open(loaded.screenshot) as img:
            img.convert("RGB").quantize(96).save(DOCS / name, optimize=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("browser")
    scenario = replace(SCENARIOS["drift_and_decay"], scores_per_hour=400.0)
    return write_world(root / "w", scenario, start=START, end=START + timedelta(days=18), seed=11)


def test_checks_fail_on_a_blank_or_broken_page(tmp_path: Path) -> None:
    """The detectors this file relies on do detect: a blank page, a script error."""
    blank = tmp_path / "blank.html"
    blank.write_text("<!doctype html><title>x</title>")
    loaded = load(blank.as_uri(), tmp_path, "blank", height=600)
    assert not not_blank(loaded.screenshot)
    broken = tmp_path / "broken.html"
    broken.write_text("<!doctype html><p>x</p><script>undefinedFunction()</script>")
    loaded = load(broken.as_uri(), tmp_path, "broken", height=600)
    assert any("ReferenceError" in line for line in loaded.console)


def test_report_file_renders_in_chromium(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = ["--at", AT.isoformat(), "--replay-from", REPLAY]
    main(["check", "--config", str(world.config_path), "--json", *at])
    doc = json.loads(capsys.readouterr().out)["monitors"][0]
    page = tmp_path / "report.html"
    main(["report", "--config", str(world.config_path), "--out", str(page), *at])
    capsys.readouterr()
    loaded = load(page.as_uri(), tmp_path, "report", height=5200)
    assert loaded.console == []
    cells = parse(loaded.dom)
    # every chart is in the DOM chromium built, with its marks
    assert cells.tags["svg"] >= 5
    assert cells.classes["bar-ref"] == doc["input"]["psi_bins"]
    assert cells.classes["bar-cur"] == doc["input"]["psi_bins"]
    assert cells.classes["pair circle"] == doc["outcome"]["n_pairs"]
    assert cells.classes["ks-gap"] == 1
    assert cells.classes["line-ref"] >= 2  # the reference ECDF and the CUSUM
    # the numbers chromium shows are check --json's for the same slot
    assert len(cells.values) >= 35
    for key, value in cells.values.items():
        assert value == _json_value(doc, key), key
    assert not_blank(loaded.screenshot)
    assert palette_pixels(loaded.screenshot, OKABE_BLUE) > 2000
    assert palette_pixels(loaded.screenshot, CURRENT_ORANGE) > 2000
    _keep(loaded, "report_monitor.png")
    phone = load(page.as_uri(), tmp_path, "phone", width=390, height=2600)
    assert phone.console == []
    assert not_blank(phone.screenshot)
    assert palette_pixels(phone.screenshot, OKABE_BLUE) > 300
    _keep(phone, "report_phone.png")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real daemon process (``monitor demo``) on a free port, stopped at the end."""
    port = _free_port()
    log = (tmp_path / "demo.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "monitor",
            "demo",
            "--dir",
            str(tmp_path / "world"),
            "--listen",
            f"127.0.0.1:{port}",
            "--tick",
            "0.2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _status(base: str) -> Any:
    with urllib.request.urlopen(f"{base}/status", timeout=5) as r:
        return json.loads(r.read())


def test_daemon_pages_render_in_chromium(
    demo: tuple[str, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    base, _ = demo

    def decayed() -> Any:
        doc = _status(base)
        mon = doc["monitors"][0]
        return doc if mon["state"] == "model_decay" and mon["runs_total"] >= 20 else None

    wait_for(decayed, timeout=120, what="the demo daemon to reach model_decay")
    landing = load(f"{base}/", tmp_path, "landing", height=700)
    assert landing.console == []
    cells = parse(landing.dom)
    names = [m["name"] for m in _status(base)["monitors"]]
    assert cells.tags["tr"] == len(names) + 1
    for name in names:
        assert f'href="/monitors/{name}"' in landing.dom
    assert "model_decay" in landing.dom
    assert not_blank(landing.screenshot)
    _keep(landing, "report_landing.png")

    name = names[0]
    page = load(f"{base}/monitors/{name}", tmp_path, "daemon", height=5200)
    assert page.console == []
    cells = parse(page.dom)
    assert cells.tags["svg"] >= 5
    assert cells.classes["bar-ref"] == cells.classes["bar-cur"] >= 2
    assert cells.classes["pair circle"] >= 100
    assert cells.classes["state-change"] >= 2  # ok -> data_drift -> model_decay
    assert not_blank(page.screenshot)
    assert palette_pixels(page.screenshot, CURRENT_ORANGE) > 2000
    _keep(page, "report_daemon.png")
