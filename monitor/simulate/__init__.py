"""World simulator: retrieval logs with known drift and decay, for the demo, tests and benchmarks.

Two logs come out of a world, as the daemon reads them:

* **scores**: one top-1 retrieval score per served query. Each query is *easy* or *hard*; its score
  is 0 with probability ``p0`` (a point mass: nothing matched), otherwise lognormal (skewed):

  ``p0_easy(t) = zero_share - hard_share * ZERO_GAP + z(t)``,
  ``p0_hard(t) = p0_easy(t) + ZERO_GAP``,
  ``z(t) = zero_daily_amplitude * cos(2π (hour(t) - 3) / 24) + zero_weekend_shift * weekend(t)``,
  ``score | easy, > 0 ~ exp(N(ln 11, 0.35²))``, ``score | hard, > 0 ~ exp(N(ln 6.5, 0.45²))``,

  so the zero share at the base mix is exactly ``zero_share`` when ``z = 0``. ``hour(t)`` is the
  fractional UTC hour of the row's timestamp; ``weekend(t)`` is 1 on Saturdays and Sundays (UTC).
  The share of hard queries at time ``t`` is

  ``h(t) = hard_share + mix_daily_amplitude * cos(2π (hour(t) - 3) / 24)
  + mix_weekend_shift * weekend(t) + drift_strength * drift_level(t)``

  (the drift term only in ``drift_segments``), so the expected share of exact zeros at ``t`` is
  ``p0_easy(t) + ZERO_GAP * h(t)``. Validation keeps ``h`` and both ``p0`` in [0, 1] at every
  ``t`` (see :func:`with_seasonality`, :func:`diurnal`, :func:`strong_seasonality` for presets
  of the cycle). Traffic per hour is Poisson with mean

  ``scores_per_hour * (1 + volume_daily_amplitude * cos(2π (hour - 14) / 24))
  * (volume_weekend_factor if weekend else 1) / ((5 + 2 * volume_weekend_factor) / 7)``,

  i.e. a daily peak at 14:00 UTC, quieter weekends, and a weekly mean of ``scores_per_hour``.
  Timestamps are uniform within the hour. Covariate shift (drift) is *only* a change of the mix:
  the score model per query type never changes.

* **outcomes**: a FIXED golden set of ``golden_set_size`` labelled queries (``"q0001"``, ...),
  evaluated ``evaluations_per_day`` times a day from ``evaluation_hour`` (UTC) on, each run spread
  over 15 minutes; a share ``repeat_share`` of the queries is evaluated a second time in the same
  run (15-20 minutes after it starts) so that consumers must average by query id. The outcome of
  query ``q`` at a run at time ``t`` is

  ``clip(theta_q - drop_q * decay_level(t) + eps, 0, 1)``, ``theta_q ~ Beta`` with mean
  ``quality_mean`` and sd ``quality_sd`` (between queries), ``eps ~ N(0, evaluation_noise_sd²)``
  (between evaluations), ``drop_q ~ N(decay_size, (decay_spread * decay_size)²)``. The first
  ``round(flaky_share * golden_set_size)`` queries are *flaky*: a run finds their relevant
  document with chance ``flaky_find`` (both evaluations of a run alike) and scores 0 otherwise,
  a right-skewed run-to-run variation (an ANN index that finds a hard query's document now
  and then).

  Every query of a run uses the level at the run's *start* (``evaluation_hour`` + k * 24 h /
  ``evaluations_per_day``), so a decay whose onset falls at any hour or minute takes effect from
  the first run that starts at or after it.
  ``decay_size`` is the mean drop *before* clipping; clipping at 0 makes the realised mean drop
  slightly smaller (a few per mille of it at the defaults). Because the golden set is fixed, drift
  leaves outcomes untouched: under covariate shift the paired difference is exactly zero in
  expectation (the outcomes are the very same numbers as in the stationary world with that seed).

Time. ``drift_start`` and ``decay_start`` are offsets from the world's *origin* (by default the
``start`` of the span generated). ``drift_level`` / ``decay_level`` are 0 before the start, then 1
(abrupt) or a linear ramp to 1 over ``*_ramp`` (gradual). Timestamps are ``datetime64[us]`` in UTC;
naive ``datetime`` arguments are taken as UTC.

Feeds. Both logs are drawn in full and then thinned, so a feed setting never changes a draw.
Score rows at or after ``origin + scores_stop`` are dropped (a dead feed; ``None``: never), and
so are those in ``[origin + a, origin + b)`` when ``scores_outage = (a, b)`` (the volume
collapses to zero, then recovers at ``b`` with the world it would have had). Outcome rows at or
after ``origin + outcomes_stop`` are dropped; a run in progress at the stop keeps only the rows
logged before it (a partial run, as a real feed dying mid-run leaves).

Randomness. A world is a function of (scenario, origin, seed): every whole UTC day is generated from
its own stream ``SeedSequence(seed, spawn_key=(stream, day_since_epoch))`` and the golden set from
``spawn_key=(GOLDEN,)``, then cropped to ``[start, end)``. Two spans of one world therefore agree
exactly where they overlap, and the golden-set qualities do not depend on the span. A
``numpy.random.Generator`` passed as ``rng`` is consumed once to draw the world's seed. The
seasonality of the zero share and the feed settings use no randomness of their own: at their
defaults (0, 0, None, None, None) every world is the same, bit for bit, as before they existed.

True PSI. Outside the feeds the score distribution at any time is a point mass at 0 plus the
two lognormals, with masses set by ``h(t)`` and ``p0(t)``; over a span it is the same mixture
with volume-weighted masses. :func:`score_mixture` integrates them (exact to rounding),
:func:`true_psi` is the population PSI of one such distribution against a reference span on
the reference's decile bins (Monte Carlo as a fallback and cross-check), and
:func:`edge_strength` finds by root finding the ``drift_strength`` whose true PSI equals a
tolerance, to put a world exactly at the edge of the drift test's null (PSI <= tolerance);
:func:`psi_crossing` dates when a trailing window's true PSI first reaches a level (e.g. when a
gradual drift crosses twice the tolerance).

Generation is pure numpy; only :func:`write_world` touches parquet (through ``monitor.sources``);
the true-PSI helpers use scipy (``ndtr``, ``brentq``).

The package: ``scenario`` (the model's parameters, presets and levels over time), ``generate``
(the logs, drawn day by day), ``truth`` (true PSI and the edge of the null) and ``world`` (a
world written to disk with its configuration).
"""

from __future__ import annotations

from monitor.simulate.generate import generate_outcomes, generate_scores, golden_qualities
from monitor.simulate.scenario import (
    EASY_LOGNORMAL,
    HARD_LOGNORMAL,
    LOCALE_WEIGHTS_20,
    LOCALES_20,
    MIX_PEAK_HOUR,
    REPEAT_LENGTH,
    RUN_LENGTH,
    SCENARIOS,
    VOLUME_PEAK_HOUR,
    ZERO_GAP,
    OutcomeLog,
    Scenario,
    ScoreLog,
    World,
    diurnal,
    strong_seasonality,
    with_seasonality,
)
from monitor.simulate.truth import (
    EDGE_ORIGIN,
    ScoreMixture,
    at_edge,
    edge_strength,
    psi_crossing,
    score_mixture,
    true_psi,
)
from monitor.simulate.world import config_text, split_by_day, write_world

__all__ = [
    "EASY_LOGNORMAL",
    "EDGE_ORIGIN",
    "HARD_LOGNORMAL",
    "LOCALES_20",
    "LOCALE_WEIGHTS_20",
    "MIX_PEAK_HOUR",
    "REPEAT_LENGTH",
    "RUN_LENGTH",
    "SCENARIOS",
    "VOLUME_PEAK_HOUR",
    "ZERO_GAP",
    "OutcomeLog",
    "Scenario",
    "ScoreLog",
    "ScoreMixture",
    "World",
    "at_edge",
    "config_text",
    "diurnal",
    "edge_strength",
    "generate_outcomes",
    "generate_scores",
    "golden_qualities",
    "psi_crossing",
    "score_mixture",
    "split_by_day",
    "strong_seasonality",
    "true_psi",
    "with_seasonality",
    "write_world",
]
