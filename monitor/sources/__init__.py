"""Parquet sources: the only package that imports pyarrow.

Turns parquet logs into the float64 arrays the statistics layer needs, and writes parquet for the
demo world and the tests. The data contract is in ``docs/data-contract.md``; in short:

* A source path is a parquet file, a directory (read recursively), a glob, or a URI that pyarrow's
  filesystems understand (``file://``, ``s3://``, ...). Below a directory or a glob's fixed prefix,
  files and directories whose names start with ``_`` or ``.`` are skipped.
* Hive partition directories whose value is a UTC date (``date=2026-11-30``) or that spell a
  UTC period with ``year=``/``month=``/``day=``/``hour=`` are pruned by the window without being
  opened. A file read from such a partition must hold only timestamps inside it
  (``SchemaError`` otherwise), because other windows would skip it.
* Windows are half-open, ``[start, end)`` in UTC: an event at ``start`` is in, one at ``end`` is
  out. Naive timestamp columns are UTC; integer epoch columns need ``timestamp_unit``.
* Within a window, rows are counted (``rows``); rows with a null, NaN or infinite value are
  dropped and counted; when ``dropped / rows > max_invalid_share`` the read raises
  ``BadValuesError``. An empty window is not an error: arrays of length 0 come back, with the
  source's newest timestamp.
* A source may instead be a Delta Lake table (``format = "delta"``, by path) or an Iceberg
  table (``format = "iceberg"``, by name in a catalog): its current snapshot's data files are
  read by the same reader (``monitor.sources.tables``; what is refused is said there).
* Every pyarrow failure becomes a ``SourceError`` subclass that names the file and column.

Footers and row-group statistics are cached per ``(path, size, mtime, ctime)``, so a daemon or a
backtest that reads window after window lists only the partitions it needs and never re-reads a
footer.

The package, in the order data flows through it::

    model       Window, ScoreSpec / OutcomeSpec and the read results (no pyarrow)
    translate   pyarrow / OS exceptions -> SourceError subclasses naming the file
    paths       a source path (file, directory, glob, URI) listed with partition pruning
    footers     parquet footers and row-group timestamp statistics, cached
    partitions  which files and row groups may hold a window; the newest timestamp
    columns     column checks and conversions shared by the readers
    scores      read_scores, read_summaries (one row group at a time, on a frozen grid)
    outcomes    read_outcomes, pair_outcomes
    textfiles   parquet or TREC text? and the TREC run / qrels line formats
    ranked      ids as exact bytes (words + fingerprint); placement, duplicates, the join
    judgments   judgments_version: qrels read and coded once per version (cached)
    judged      read_judged_runs, read_run_times: ranked runs placed and joined to judgments
    probe       inspect_source: lists files and reads footers only (validate --sources)
    tables      Delta Lake / Iceberg tables: a snapshot's data files, pruned by the table's
                statistics, for the same planner and reader (the optional extra .[tables])
    writing     write_parquet
"""

from __future__ import annotations

from monitor.sources.footers import clear_cache
from monitor.sources.judged import read_judged_runs, read_run_times
from monitor.sources.judgments import judgments_version
from monitor.sources.model import (
    JudgedRuns,
    JudgedSpec,
    OutcomeSpec,
    OutcomeWindow,
    PairedOutcomes,
    ScoreSpec,
    ScoreWindow,
    Window,
)
from monitor.sources.outcomes import pair_outcomes, read_outcomes
from monitor.sources.partitions import latest_timestamp
from monitor.sources.paths import display_path
from monitor.sources.probe import SourceReport, inspect_source
from monitor.sources.scores import (
    FileStat,
    SegmentBound,
    SummaryPart,
    SummaryTask,
    check_summary_part,
    files_digest,
    merge_summary_parts,
    read_scores,
    read_summaries,
    read_summary_part,
    segment_names,
    summary_part_batches,
    window_file_stats,
    window_files,
    window_tasks,
)
from monitor.sources.tables import current_snapshot, pin_snapshot
from monitor.sources.writing import write_parquet

__all__ = [
    "FileStat",
    "JudgedRuns",
    "JudgedSpec",
    "OutcomeSpec",
    "OutcomeWindow",
    "PairedOutcomes",
    "ScoreSpec",
    "ScoreWindow",
    "SegmentBound",
    "SourceReport",
    "SummaryPart",
    "SummaryTask",
    "Window",
    "check_summary_part",
    "clear_cache",
    "current_snapshot",
    "display_path",
    "files_digest",
    "inspect_source",
    "judgments_version",
    "latest_timestamp",
    "merge_summary_parts",
    "pair_outcomes",
    "pin_snapshot",
    "read_judged_runs",
    "read_outcomes",
    "read_run_times",
    "read_scores",
    "read_summaries",
    "read_summary_part",
    "segment_names",
    "summary_part_batches",
    "window_file_stats",
    "window_files",
    "window_tasks",
    "write_parquet",
]
