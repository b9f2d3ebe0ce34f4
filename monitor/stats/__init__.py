"""Pure statistics: numpy and scipy in, frozen result dataclasses out. No I/O, clock or global RNG.

Modules: ``drift`` (PSI, KS, point-mass rate), ``paired`` (decay tests on per-query outcomes),
``multiple`` (adjusted p-values), ``sequential`` (CUSUM alarm design), ``ranking`` (per-query IR
metrics from coded runs and judgments), ``calibration`` (ECE, MCE, Brier, AUC of scores),
``summary`` (mergeable score summaries on a frozen grid: PSI bit-equal, a KS bracket).
Conventions and formulas are in ``docs/statistics.md``.
"""

from monitor.stats.calibration import CalibrationBin, CalibrationResult, calibration
from monitor.stats.drift import (
    BaselinePositions,
    DriftBaseline,
    DriftResult,
    KSResult,
    ProportionResult,
    PSIResult,
    baseline_positions,
    build_baseline,
    drift_tests,
    ks_2samp,
    proportion_test,
    proportion_test_counts,
    psi,
    psi_from_counts,
    psi_test_counts,
)
from monitor.stats.multiple import adjust_pvalues
from monitor.stats.paired import (
    ConfidenceInterval,
    PairedResult,
    PermutationResult,
    TTestResult,
    bca_interval,
    minimum_detectable_effect,
    paired_test,
    required_sample_size,
    sign_flip_test,
)
from monitor.stats.ranking import MetricSpec, RankingMetrics, parse_metric, ranking_metrics
from monitor.stats.sequential import (
    arl_for_budget,
    cusum_arl,
    cusum_step,
    cusum_threshold,
    cusum_threshold_shared,
    shewhart_threshold_shared,
    z_from_pvalue,
)
from monitor.stats.summary import (
    Grid,
    KSBracket,
    ScoreSummary,
    ks_bracket,
    psi_from_summaries,
    summarize,
    summary_grid,
)

__all__ = [
    "BaselinePositions",
    "CalibrationBin",
    "CalibrationResult",
    "ConfidenceInterval",
    "DriftBaseline",
    "DriftResult",
    "Grid",
    "KSBracket",
    "KSResult",
    "MetricSpec",
    "PSIResult",
    "PairedResult",
    "PermutationResult",
    "ProportionResult",
    "RankingMetrics",
    "ScoreSummary",
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
    "ks_bracket",
    "minimum_detectable_effect",
    "paired_test",
    "parse_metric",
    "proportion_test",
    "proportion_test_counts",
    "psi",
    "psi_from_counts",
    "psi_from_summaries",
    "psi_test_counts",
    "ranking_metrics",
    "required_sample_size",
    "shewhart_threshold_shared",
    "sign_flip_test",
    "summarize",
    "summary_grid",
    "z_from_pvalue",
]
