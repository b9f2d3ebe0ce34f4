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
REFERENCE_VECTORS = REPO.parent / "shared" / "reference_vectors.json"


@pytest.fixture(scope="session")
def reference_vectors() -> dict[str, Any]:
    """The checked values in ``../shared/reference_vectors.json``."""
    if not REFERENCE_VECTORS.exists():  # pragma: no cover - CI always has shared/
        pytest.fail(f"{REFERENCE_VECTORS} is missing: the statistics cannot be checked")
    data: dict[str, Any] = json.loads(REFERENCE_VECTORS.read_text())
    return data
