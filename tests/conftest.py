"""Shared test fixtures and the hypothesis profile (deterministic: same examples every run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "deterministic",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("deterministic")

REPO = Path(__file__).resolve().parent.parent
SHARED_VECTORS = REPO.parent / "shared" / "reference_vectors.json"
# A verbatim copy, so a clone without ../shared beside it still checks every value;
# tests/test_reference_copy.py fails if the copy and ../shared ever differ.
VENDORED_VECTORS = REPO / "tests" / "data" / "reference_vectors.json"


@pytest.fixture(scope="session")
def reference_vectors() -> dict[str, Any]:
    """The checked values in ``../shared/reference_vectors.json`` (or the vendored copy)."""
    path = SHARED_VECTORS if SHARED_VECTORS.exists() else VENDORED_VECTORS
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# ``make test`` checks this file after pytest: a test run that ended without reaching its end
# (os._exit from code under test, with any exit status) once passed CI with a tenth of the
# suite never run
FINISHED = REPO / ".pytest-finished"


def pytest_sessionstart(session: pytest.Session) -> None:
    FINISHED.unlink(missing_ok=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    FINISHED.write_text(f"{int(exitstatus)} {session.testscollected}\n")
