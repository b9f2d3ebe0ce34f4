"""The public surface of ``monitor.stats``: ``__all__`` and the frozen result types."""

from __future__ import annotations

import dataclasses

import pytest

import monitor.stats as ms

EXPECTED = {
    "BaselinePositions",
    "CalibrationBin",
    "CalibrationResult",
    "ConfidenceInterval",
    "DriftBaseline",
    "DriftResult",
    "KSResult",
    "MetricSpec",
    "PSIResult",
    "PairedResult",
    "PermutationResult",
    "ProportionResult",
    "RankingMetrics",
    "Runs",
    "TTestResult",
    "adjust_pvalues",
    "arl_for_budget",
    "baseline_positions",
    "bca_interval",
    "build_baseline",
    "calibration",
    "cusum_arl",
    "cusum_step",
    "cusum_threshold",
    "cusum_threshold_shared",
    "drift_tests",
    "ks_2samp",
    "minimum_detectable_effect",
    "paired_test",
    "parse_metric",
    "proportion_test",
    "proportion_test_counts",
    "psi",
    "psi_from_counts",
    "psi_test_counts",
    "ranking_metrics",
    "required_sample_size",
    "round_differences",
    "run_label_test",
    "difference_signs",
    "shewhart_threshold_shared",
    "sign_flip_test",
    "z_from_pvalue",
    # the summary layer (issue 13)
    "Cells",
    "Grid",
    "KSBracket",
    "ScoreSummary",
    "bin_ends",
    "cells_to_bins",
    "ks_bracket",
    "psi_from_summaries",
    "summarize",
    "summary_grid",
    # judged runs placed by the reader (issue 12)
    "JudgmentSummary",
    "judgment_summary",
    "placed_metrics",
}


def test_all_lists_the_public_names() -> None:
    assert set(ms.__all__) == EXPECTED
    assert len(ms.__all__) == len(set(ms.__all__))
    for name in ms.__all__:
        assert getattr(ms, name) is not None


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n[0].isupper()))
def test_results_are_frozen_slotted_dataclasses(name: str) -> None:
    cls = getattr(ms, name)
    assert isinstance(cls, type)
    assert dataclasses.is_dataclass(cls)
    assert getattr(cls, "__dataclass_params__").frozen  # noqa: B009
    assert hasattr(cls, "__slots__")
