"""The alerts, defined once: PromQL, severity, ``for``, annotations and a note for the reader.

:func:`alert_groups` builds them from a :class:`~deploy.mixin.config.MixinConfig`; the Prometheus
rule file, the PrometheusRule and the Grafana-managed rules are all rendered from its result, so
the three cannot disagree on an expression, a severity or a runbook link.

Prometheus annotations may call ``query`` to put the numbers that matter into the notification.
Grafana's templates have no ``query`` function, so each alert also carries a Grafana description
that uses only ``$labels`` and ``$values`` (the value of query ``A``, the alert's expression).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deploy.mixin.config import MixinConfig

# Labels that identify one monitor's series once Prometheus has scraped them.
MONITOR_KEY = "job, instance, monitor"
_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


@dataclass(frozen=True, slots=True)
class Alert:
    """One alerting rule, in the terms of a Prometheus rule file."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    grafana_description: str
    runbook_url: str
    note: str
    keep_firing_for: str | None = None

    @property
    def grafana_summary(self) -> str:
        """The summary with Prometheus' ``$value`` spelled the Grafana way (query ``A``)."""
        return re.sub(r"\$value\b", "$values.A.Value", self.summary)


@dataclass(frozen=True, slots=True)
class AlertGroup:
    """A named rule group."""

    name: str
    alerts: tuple[Alert, ...]


def _with(query: str, pipe: str, missing: str = "?") -> str:
    """Template: the first value of a PromQL ``query`` through ``pipe``, else ``missing``."""
    return (
        f"{{{{ with query ({query}) }}}}{{{{ . | first | value | {pipe} }}}}"
        f"{{{{ else }}}}{missing}{{{{ end }}}}"
    )


def _stat(metric: str, selector: str, fmt: str) -> str:
    """Template: ``metric`` selected by the template variable ``$<selector>``, ``printf fmt``."""
    return _with(f'print "{metric}" ${selector}', f'printf "{fmt}"')


def words(n: int) -> str:
    """``n`` in words up to five (``two``), in digits above."""
    return _WORDS.get(n, str(n))


_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _seconds(duration: str) -> str:
    """A Prometheus duration (``1h30m``) as seconds, for a comparison with a time difference."""
    total = sum(
        int(n) * _UNIT_SECONDS[unit]
        for n, unit in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", duration)
    )
    return f"{total:g}"


def _held(c: MixinConfig, metric: str, matchers: str = "") -> str:
    """``metric`` of the job (and ``matchers``) read through ``last_over_time`` over the hold: a
    missed scrape or a short restart (stale markers on every series) reads as the last value,
    not as no series, while a changed value is seen at once. For gauges; counters keep
    ``increase``."""
    extra = f",{matchers}" if matchers else ""
    return f"last_over_time({metric}{{{c.selector}{extra}}}[{c.hold}])"


_SEGMENT = "{{ if $labels.segment }} (segment {{ $labels.segment }}){{ end }}"
_SEL = (
    '{{ $sel := printf "{instance=%q,monitor=%q,segment=%q}" $labels.instance $labels.monitor '
    "$labels.segment }}"
    '{{ $mon := printf "{instance=%q,monitor=%q}" $labels.instance $labels.monitor }}'
)
_SINCE = (
    'printf "time() - retrieval_monitor_state_since_timestamp_seconds{instance=%q,monitor=%q}" '
    "$labels.instance $labels.monitor"
)


def _verdicts(c: MixinConfig) -> AlertGroup:
    s = c.selector
    decay, drift = c.alerts["RetrievalModelDecay"], c.alerts["RetrievalDataDrift"]
    return AlertGroup(
        "retrieval-monitor.verdicts",
        (
            Alert(
                name="RetrievalModelDecay",
                note=(
                    "Per segment: the paired test on per-query outcomes says quality dropped by "
                    "more than the tolerated margin at the per-look alpha. Independent of input "
                    "drift."
                ),
                expr=f"retrieval_monitor_model_decay{{{s}}} == 1",
                for_=decay.for_,
                keep_firing_for=decay.duration("keep_firing_for"),
                severity=decay.severity,
                summary="Retrieval quality dropped on monitor {{ $labels.monitor }}"
                + _SEGMENT
                + ".",
                description=(
                    f"{_SEL}Paired outcomes (current - reference, same query ids) moved by "
                    f"{_stat('retrieval_monitor_outcome_mean_difference', 'sel', '%.4f')}"
                    f" (interval {_stat('retrieval_monitor_outcome_ci_lower', 'sel', '%.4f')}"
                    f" to {_stat('retrieval_monitor_outcome_ci_upper', 'sel', '%.4f')})"
                    f" over {_stat('retrieval_monitor_outcome_pairs', 'sel', '%.0f')}"
                    f" pairs; one-sided p = {_stat('retrieval_monitor_outcome_pvalue', 'sel', '%.3g')}"  # noqa: E501
                    f" at per-look alpha {_stat('retrieval_monitor_outcome_alpha', 'mon', '%.3g')}"
                    f", tolerated decay {_stat('retrieval_monitor_outcome_margin', 'mon', '%.4f')}."
                ),
                grafana_description=(
                    "The paired test on per-query outcomes of monitor {{ $labels.monitor }}"
                    f"{_SEGMENT} rejects 'no worse than the tolerated margin'. The drill-down "
                    "dashboard shows the mean difference, its interval, the pairs and the p-value "
                    "against the per-look alpha."
                ),
                runbook_url=c.runbook_url("RetrievalModelDecay"),
            ),
            Alert(
                name="RetrievalDataDrift",
                note=(
                    "Per segment: the top-1 score distribution moved (CUSUM or Shewhart on PSI "
                    "evidence) while the same segment shows no decay. A decayed segment raises "
                    "RetrievalModelDecay instead; a stale score feed holds it back (the monitor is "
                    "insufficient_data and RetrievalMonitorSourceStale fires), as it holds back "
                    "the data_drift state."
                ),
                expr=(
                    f"retrieval_monitor_input_drift{{{s}}} == 1\n"
                    f"unless on ({MONITOR_KEY}, segment)\n"
                    f"retrieval_monitor_model_decay{{{s}}} == 1\n"
                    f"unless on ({MONITOR_KEY})\n"
                    f'retrieval_monitor_source_stale{{{s},source="scores"}} == 1\n'
                ),
                for_=drift.for_,
                keep_firing_for=drift.duration("keep_firing_for"),
                severity=drift.severity,
                summary=(
                    f"Score distribution drifted on monitor {{{{ $labels.monitor }}}}{_SEGMENT}; "
                    "no decay is established (no evidence is not proof of none)."
                ),
                description=(
                    f"{_SEL}PSI {_stat('retrieval_monitor_psi', 'sel', '%.4f')}"
                    f" (debiased {_stat('retrieval_monitor_psi_debiased', 'sel', '%.4f')}"
                    f", tolerance {_stat('retrieval_monitor_psi_tolerance', 'mon', '%.4f')});"
                    f" CUSUM {_stat('retrieval_monitor_drift_cusum', 'sel', '%.2f')}"
                    f" vs h = {_stat('retrieval_monitor_drift_cusum_threshold', 'mon', '%.2f')}"
                    f", latest z {_stat('retrieval_monitor_drift_z', 'sel', '%.2f')}"
                    f" vs {_stat('retrieval_monitor_drift_z_threshold', 'mon', '%.2f')};"
                    f" KS D = {_stat('retrieval_monitor_ks_statistic', 'sel', '%.3f')}."
                    " Check the outcome panel before acting: drift alone does not mean worse"
                    " results."
                ),
                grafana_description=(
                    "The top-1 score distribution of monitor {{ $labels.monitor }}"
                    f"{_SEGMENT} moved beyond its PSI tolerance while the paired outcomes "
                    "establish no decay (not proof of none). Check the outcome panel's interval "
                    "and MDE before acting: drift alone does not mean worse results."
                ),
                runbook_url=c.runbook_url("RetrievalDataDrift"),
            ),
        ),
    )


def _health(c: MixinConfig) -> AlertGroup:
    s = c.selector
    a = c.alerts
    stale_periods = a["RetrievalMonitorStale"].count("periods")
    save = a["RetrievalMonitorStateSaveFailing"]
    reset = a["RetrievalMonitorStateReset"].duration("window")
    window, save_periods = save.duration("failure_window"), save.count("periods")
    last_save = "retrieval_monitor_last_state_save_timestamp_seconds"
    interval = "retrieval_monitor_schedule_interval_seconds"
    per_monitor, daemon_wide = 'monitor!=""', 'monitor=""'
    window_samples = (
        'print "retrieval_monitor_window_samples" (printf "{instance=%q,monitor=%q,'
        'source=\\"{source}\\",window=\\"current\\"}" $labels.instance $labels.monitor)'
    )
    return AlertGroup(
        "retrieval-monitor.health",
        (
            Alert(
                name="RetrievalMonitorInsufficientData",
                note="Too few scores or labelled pairs in a window to decide anything.",
                expr=_held(c, "retrieval_monitor_state", 'state="insufficient_data"') + " == 1",
                for_=a["RetrievalMonitorInsufficientData"].for_,
                severity=a["RetrievalMonitorInsufficientData"].severity,
                summary="Monitor {{ $labels.monitor }} has too little data to decide.",
                description=(
                    "Monitor {{ $labels.monitor }} has been in state insufficient_data for "
                    + _with(_SINCE, "humanizeDuration")
                    + ". Current window: "
                    + _with(window_samples.replace("{source}", "scores"), 'printf "%.0f"', "no")
                    + " scores, "
                    + _with(window_samples.replace("{source}", "outcomes"), 'printf "%.0f"', "no")
                    + " outcomes. Neither drift nor decay can be detected until enough data"
                    " arrives."
                ),
                grafana_description=(
                    "Monitor {{ $labels.monitor }} on {{ $labels.instance }} is in state "
                    "insufficient_data: too few scores or labelled pairs in a window. Neither "
                    "drift nor decay can be detected until enough data arrives."
                ),
                runbook_url=c.runbook_url("RetrievalMonitorInsufficientData"),
            ),
            Alert(
                name="RetrievalMonitorStale",
                note=(
                    f"No successful check for {words(stale_periods)} scheduled periods. "
                    "last_success and state_since are persisted by the daemon, so a restart "
                    "neither resets nor fakes this clock. When a monitor has never succeeded "
                    "(last_success 0 or absent), the clock starts when its current state began."
                ),
                expr=(
                    "time() - (\n"
                    f"    {_held(c, 'retrieval_monitor_last_success_timestamp_seconds')} > 0\n"
                    f"  or on ({MONITOR_KEY})\n"
                    f"    {_held(c, 'retrieval_monitor_state_since_timestamp_seconds')}\n"
                    ")\n"
                    f"> on ({MONITOR_KEY})\n"
                    f"{stale_periods} * "
                    f"{_held(c, 'retrieval_monitor_schedule_interval_seconds')}\n"
                ),
                for_=a["RetrievalMonitorStale"].for_,
                severity=a["RetrievalMonitorStale"].severity,
                summary=(
                    "Monitor {{ $labels.monitor }} has had no successful check for "
                    "{{ $value | humanizeDuration }}."
                ),
                description=(
                    "The last successful check of monitor {{ $labels.monitor }} on "
                    "{{ $labels.instance }} was {{ $value | humanizeDuration }} ago, more than "
                    f"{words(stale_periods)} scheduled periods ("
                    + _with(
                        f'printf "{stale_periods} * retrieval_monitor_schedule_interval_seconds'
                        '{instance=%q,monitor=%q}" $labels.instance $labels.monitor',
                        "humanizeDuration",
                    )
                    + "). Its drift and decay verdicts are out of date."
                ),
                grafana_description=(
                    "The last successful check of monitor {{ $labels.monitor }} on "
                    "{{ $labels.instance }} was {{ $values.A.Value | humanizeDuration }} ago, "
                    f"more than {words(stale_periods)} scheduled periods. Its drift and decay "
                    "verdicts are out of date."
                ),
                runbook_url=c.runbook_url("RetrievalMonitorStale"),
            ),
            Alert(
                name="RetrievalMonitorRunFailures",
                note=(
                    "The latest check ended in state `error` (a source or configuration problem, "
                    "not lack of data) and nothing has fixed it since."
                ),
                expr=_held(c, "retrieval_monitor_state", 'state="error"') + " == 1",
                for_=a["RetrievalMonitorRunFailures"].for_,
                severity=a["RetrievalMonitorRunFailures"].severity,
                summary="Checks of monitor {{ $labels.monitor }} are failing.",
                description=(
                    "Monitor {{ $labels.monitor }} on {{ $labels.instance }} has been in state "
                    f"error for {_with(_SINCE, 'humanizeDuration')}; "
                    + _with(
                        'printf "retrieval_monitor_run_failures_total{instance=%q,monitor=%q}" '
                        "$labels.instance $labels.monitor",
                        'printf "%.0f"',
                    )
                    + " of "
                    + _with(
                        'printf "retrieval_monitor_runs_total{instance=%q,monitor=%q}" '
                        "$labels.instance $labels.monitor",
                        'printf "%.0f"',
                    )
                    + " runs failed since the daemon started. The reason is in the daemon log and"
                    " on /status."
                ),
                grafana_description=(
                    "Monitor {{ $labels.monitor }} on {{ $labels.instance }} is in state error: "
                    "its latest check could not read a source or its configuration is wrong. The "
                    "reason is in the daemon log and on /status."
                ),
                runbook_url=c.runbook_url("RetrievalMonitorRunFailures"),
            ),
            Alert(
                name="RetrievalMonitorDown",
                note="The scrape target is down, or Prometheus has no target for the job at all.",
                expr=f"up{{{s}}} == 0\nor absent(up{{{s}}})\n",
                for_=a["RetrievalMonitorDown"].for_,
                severity=a["RetrievalMonitorDown"].severity,
                summary="The retrieval-monitor daemon is not being scraped.",
                description=(
                    "{{ if $labels.instance }}Target {{ $labels.instance }} of job "
                    "{{ $labels.job }} is down{{ else }}Prometheus has no target for job "
                    f"{c.job}{{{{ end }}}}. No drift or decay verdicts reach Prometheus while "
                    "this fires."
                ),
                grafana_description=(
                    "{{ if $labels.instance }}Target {{ $labels.instance }} of job "
                    "{{ $labels.job }} is down{{ else }}Prometheus has no target for job "
                    f"{c.job}{{{{ end }}}}. No drift or decay verdicts reach Prometheus while "
                    "this fires."
                ),
                runbook_url=c.runbook_url("RetrievalMonitorDown"),
            ),
            Alert(
                name="RetrievalMonitorSourceStale",
                note=(
                    "The newest row of a source (scores or outcomes) is older than the source's "
                    "max_lag: the producer stopped writing, so checks run on old data."
                ),
                expr=_held(c, "retrieval_monitor_source_stale") + " == 1",
                for_=a["RetrievalMonitorSourceStale"].for_,
                severity=a["RetrievalMonitorSourceStale"].severity,
                summary=(
                    "The {{ $labels.source }} data of monitor {{ $labels.monitor }} stopped "
                    "arriving."
                ),
                description=(
                    "The newest {{ $labels.source }} row of monitor {{ $labels.monitor }} on "
                    "{{ $labels.instance }} is "
                    + _with(
                        'printf "time() - retrieval_monitor_source_last_timestamp_seconds'
                        '{instance=%q,monitor=%q,source=%q}" $labels.instance $labels.monitor '
                        "$labels.source",
                        "humanizeDuration",
                    )
                    + " old, older than the source's max_lag. Checks keep running on the data"
                    " that did arrive, so drift and decay verdicts describe the past."
                ),
                grafana_description=(
                    "The newest {{ $labels.source }} row of monitor {{ $labels.monitor }} on "
                    "{{ $labels.instance }} is older than the source's max_lag. Checks keep "
                    "running on the data that did arrive, so drift and decay verdicts describe "
                    "the past."
                ),
                runbook_url=c.runbook_url("RetrievalMonitorSourceStale"),
            ),
            Alert(
                name="RetrievalMonitorStateSaveFailing",
                note=(
                    "The latest state save failed (until one succeeds: a failure at start-up "
                    f"or a failing disk was let go once {window} had passed), a save failed in "
                    f"the last {window}, or the last successful save is "
                    f"older than {words(save_periods)} schedule periods: per monitor when the "
                    "gauge has a monitor label, else against the daemon's most frequent "
                    "schedule. A timestamp of 0 (never saved yet) is left to the failure counter."
                ),
                expr=(
                    f"{_held(c, 'retrieval_monitor_state_save_failing')} == 1\n"
                    "or\n"
                    f"increase(retrieval_monitor_state_save_failures_total{{{s}}}[{window}]) > 0\n"
                    "or\n"
                    f"  time() - ({_held(c, last_save, per_monitor)} > 0)\n"
                    f"  > on ({MONITOR_KEY})\n"
                    f"  {save_periods} * {_held(c, interval)}\n"
                    "or\n"
                    f"  time() - ({_held(c, last_save, daemon_wide)} > 0)\n"
                    "  > on (job, instance) group_left ()\n"
                    f"  {save_periods} * min by (job, instance) ({_held(c, interval)})\n"
                ),
                for_=save.for_,
                severity=save.severity,
                summary="State saves of retrieval-monitor on {{ $labels.instance }} are failing.",
                description=(
                    "{{ if $labels.monitor }}Monitor {{ $labels.monitor }}: {{ end }}"
                    + _with(
                        'printf "sum(increase(retrieval_monitor_state_save_failures_total'
                        f'{{instance=%q,monitor=%q}}[{window}])) or vector(0)" $labels.instance '
                        "$labels.monitor",
                        'printf "%.0f"',
                    )
                    + f" failed state saves in the last {window}; the oldest last successful"
                    " save is "
                    + _with(
                        'printf "time() - min(retrieval_monitor_last_state_save_timestamp_seconds'
                        '{instance=%q,monitor=%q} > 0)" $labels.instance $labels.monitor',
                        "humanizeDuration",
                        "unknown",
                    )
                    + " old. Sequential progress since then is lost on a restart, and /healthz"
                    " reports degraded."
                ),
                grafana_description=(
                    "{{ if $labels.monitor }}Monitor {{ $labels.monitor }}: {{ end }}state saves "
                    f"failed in the last {window}, or the last successful save is older than "
                    f"{words(save_periods)} schedule periods. Sequential progress since then is "
                    "lost on a restart, and /healthz reports degraded."
                ),
                runbook_url=c.runbook_url("RetrievalMonitorStateSaveFailing"),
            ),
            Alert(
                name="RetrievalMonitorStateReset",
                note=(
                    "A monitor's state could not be trusted (a corrupt, truncated or foreign "
                    f"file; a time in the future) and it started fresh within the last {reset}: "
                    "a raised decay or drift page resolved then without the data changing. "
                    "config_changed resets are an edit's intent and left out. The reset's time "
                    "is lost with a restart, which ends the alert early."
                ),
                # the time of the latest reset, not the counter's increase: a reset at start-up
                # is counted before the first scrape, and increase() saw no rise
                expr=(
                    "time() - "
                    + _held(
                        c,
                        "retrieval_monitor_last_state_reset_timestamp_seconds",
                        'reason!="config_changed"',
                    )
                    + f" < {_seconds(reset)}"
                ),
                for_=a["RetrievalMonitorStateReset"].for_,
                severity=a["RetrievalMonitorStateReset"].severity,
                summary=(
                    "The state of monitor {{ $labels.monitor }} was reset ({{ $labels.reason }})."
                ),
                description=(
                    "Monitor {{ $labels.monitor }} on {{ $labels.instance }} reset its "
                    "sequential state ({{ $labels.reason }}) and started fresh: its CUSUMs, "
                    "anchors and raised alarms are gone, so a decay or drift page it held "
                    "resolved without the data changing. A file that could not be trusted is "
                    "kept in state_dir as NAME.json.corrupt-TIME."
                ),
                grafana_description=(
                    "Monitor {{ $labels.monitor }} on {{ $labels.instance }} reset its "
                    "sequential state ({{ $labels.reason }}) and started fresh: a decay or drift "
                    "page it held resolved without the data changing."
                ),
                runbook_url=c.runbook_url("RetrievalMonitorStateReset"),
            ),
            Alert(
                name="RetrievalMonitorLateScores",
                note=(
                    "The latest check found scores in drift evidence blocks it had tested "
                    "before: a writer lands them later than drift.settle, and no drift test "
                    "will see them (a drift they alone carry cannot alarm). A ticket: raise "
                    "drift.settle to that writer's lateness."
                ),
                expr=_held(c, "retrieval_monitor_late_scores") + " > 0",
                for_=a["RetrievalMonitorLateScores"].for_,
                severity=a["RetrievalMonitorLateScores"].severity,
                summary=(
                    "Scores of monitor {{ $labels.monitor }}"
                    + _SEGMENT
                    + " landed after their drift evidence was tested."
                ),
                description=(
                    '{{ $value | printf "%.0f" }} scores of monitor {{ $labels.monitor }}'
                    + _SEGMENT
                    + " on {{ $labels.instance }} landed after the evidence block holding their"
                    " time had been tested: later than drift.settle, so no drift test sees them."
                    " The check's reasons say how late (more than L, at most U); set"
                    " drift.settle to that writer's lateness (blocks, and drift alarms, then lag"
                    " by it)."
                ),
                grafana_description=(
                    "Scores of monitor {{ $labels.monitor }} on {{ $labels.instance }} landed "
                    "after the evidence block holding their time had been tested (later than "
                    "drift.settle): no drift test sees them. Set drift.settle to the writer's "
                    "lateness; the check's reasons say how late."
                ),
                runbook_url=c.runbook_url("RetrievalMonitorLateScores"),
            ),
        ),
    )


def alert_groups(config: MixinConfig) -> tuple[AlertGroup, ...]:
    """Every alert of the stack, in rule groups, built from ``config``."""
    return (_verdicts(config), _health(config))
