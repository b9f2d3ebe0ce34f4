"""CUSUM helpers against the reference design values (notes D.2-D.3)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from monitor.errors import StatsInputError
from monitor.stats import arl_for_budget, cusum_arl, cusum_step, cusum_threshold, z_from_pvalue

REL = 1e-9


@pytest.mark.parametrize("k", ["0.25", "0.5", "1.0"])
def test_cusum_markov_reference(reference_vectors: dict[str, Any], k: str) -> None:
    cusum = reference_vectors["sequential"]["cusum"]
    row = cusum[f"k{k}"]
    kk = float(k)
    assert cusum_arl(row["h_markov"], k=kk) == pytest.approx(row["ARL0_markov_at_h"], rel=REL)
    for mu in ("0.5", "1", "2", "3"):
        assert cusum_arl(row["h_markov"], k=kk, shift=float(mu)) == pytest.approx(
            row[f"ARL1_mu{mu}"], rel=REL
        )
    assert cusum_threshold(cusum["target_ARL0"], k=kk) == pytest.approx(row["h_markov"], rel=REL)


def test_budget_reference(reference_vectors: dict[str, Any]) -> None:
    seq = reference_vectors["sequential"]
    assert arl_for_budget(720, 0.05) == pytest.approx(seq["cusum"]["target_ARL0"], rel=REL)
    design = seq["design"]["cusum_k0.5_share0.04"]
    assert arl_for_budget(720, 0.04) == pytest.approx(design["ARL0"], rel=REL)
    combined = seq["recommended_input_drift_combined"]
    assert cusum_threshold(design["ARL0"]) == pytest.approx(
        combined["h_markov_ARL0_17638"], rel=REL
    )


def test_z_from_pvalue_reference(reference_vectors: dict[str, Any]) -> None:
    for row in reference_vectors["sequential"]["repeated_testing"].values():
        a = row["bonferroni_alpha_per_look"]
        assert z_from_pvalue(a) == pytest.approx(row["z_one_sided"], rel=REL)
    assert z_from_pvalue(0.0) == 8.0
    assert z_from_pvalue(1.0) == -4.0
    assert z_from_pvalue(0.5) == 0.0
    assert z_from_pvalue(1e-300, upper=50.0) == pytest.approx(stats.norm.isf(1e-300), rel=REL)


def test_cusum_step_and_alarm_sequence() -> None:
    s = 0.0
    path = []
    for z in (1.0, 2.0, -5.0, 0.5, 3.0):
        s = cusum_step(s, z)
        path.append(s)
    assert path == [0.5, 2.0, 0.0, 0.0, 2.5]


def test_cusum_arl_converges_to_continuous_state() -> None:
    # the 400-state chain sits ~1 % below the continuous ARL (Nyström value 14 175.45)
    fine = cusum_arl(7.709199697125155, states=1000)
    assert cusum_arl(7.709199697125155) < fine < 14_176
    assert cusum_arl(4.0, shift=1.0) < cusum_arl(4.0)


@given(st.floats(0, 20), st.floats(-10, 10), st.floats(0, 3))
def test_cusum_step_properties(previous: float, z: float, k: float) -> None:
    s = cusum_step(previous, z, k=k)
    assert s >= 0.0
    assert s >= previous + z - k


@given(st.floats(0, 1))
def test_z_from_pvalue_monotone(p: float) -> None:
    assert z_from_pvalue(p) >= z_from_pvalue(min(p + 0.01, 1.0))


def test_z_from_pvalue_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`pvalue` must be a finite number in \[0, 1\]"):
        z_from_pvalue(1.5)
    with pytest.raises(StatsInputError, match="`lower` must be < `upper`"):
        z_from_pvalue(0.5, lower=3.0, upper=3.0)
    with pytest.raises(StatsInputError, match="`upper` must be a finite number"):
        z_from_pvalue(0.5, upper=np.inf)


def test_cusum_step_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`previous` must be a finite number in \[0, inf\]"):
        cusum_step(-1.0, 0.0)
    with pytest.raises(StatsInputError, match="`z` must be a finite number"):
        cusum_step(0.0, np.nan)
    with pytest.raises(StatsInputError, match="`k` must be a finite number"):
        cusum_step(0.0, 1.0, k=-0.5)


def test_cusum_arl_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`h` must be a finite number in \(0, inf\]"):
        cusum_arl(0.0)
    with pytest.raises(StatsInputError, match="`k` must be a finite number"):
        cusum_arl(1.0, k=-1)
    with pytest.raises(StatsInputError, match="`shift` must be a finite number"):
        cusum_arl(1.0, shift=np.inf)
    with pytest.raises(StatsInputError, match="`states` must be an integer >= 2; got 1"):
        cusum_arl(1.0, states=1)


def test_cusum_threshold_iv() -> None:
    with pytest.raises(StatsInputError, match=r"`arl0` must be a finite number in \(1, inf\]"):
        cusum_threshold(1.0)
    with pytest.raises(StatsInputError, match="`arl0` must exceed the run length at h -> 0"):
        cusum_threshold(1.5, k=3.0)
    with pytest.raises(StatsInputError, match="`k` must be a finite number"):
        cusum_threshold(100.0, k=np.nan)


def test_arl_for_budget_iv() -> None:
    with pytest.raises(StatsInputError, match="`looks` must be an integer >= 1; got 0"):
        arl_for_budget(0, 0.05)
    with pytest.raises(StatsInputError, match=r"`false_alarm_probability` must be a finite number"):
        arl_for_budget(720, 1.0)


def test_a_run_length_past_float_precision_is_infinite_not_garbage() -> None:
    """A strongly negative shift: the chain all but never escapes, I - P is singular in
    floats, and the solve gave -2.1e21; the run length is reported as infinite."""
    from monitor.stats import cusum_arl

    for shift in (-4.0, -6.0, -8.0):
        arl = cusum_arl(7.709, k=0.5, shift=shift)
        assert arl >= cusum_arl(7.709, k=0.5, shift=-2.0)
