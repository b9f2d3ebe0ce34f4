"""Compose demo: write a synthetic world ending now, then exec ``monitor run`` on it.

Environment: ``WORLD_DIR`` (default /var/lib/retrieval-monitor/world), ``SCENARIO`` (a name in
``monitor.simulate.SCENARIOS``, default ``abrupt_decay``), ``DAYS`` of history (default 17: the
scenarios' change happens at day 15, so the first check already sees it), ``SEED`` (default 7),
``LISTEN`` (default 0.0.0.0:9464), ``SCHEDULE`` (default 5m).
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from monitor.simulate import SCENARIOS, write_world


def drop_old_state(world_dir: Path) -> None:
    """Remove the state an earlier world left in ``world_dir`` (its ``state`` directory, the
    ``state_dir`` of the config ``write_world`` writes): the compose volume outlives the
    container, and a world written now under the same monitor name adopted it, so a second
    ``up`` with ``SCENARIO=covariate_shift`` showed the earlier abrupt_decay world's raised
    model_decay instead of data_drift."""
    state = world_dir / "state"
    if state.is_dir() and not state.is_symlink():
        shutil.rmtree(state)


def main() -> None:
    end = datetime.now(UTC).replace(microsecond=0)
    days = int(os.environ.get("DAYS", "17"))
    directory = Path(os.environ.get("WORLD_DIR", "/var/lib/retrieval-monitor/world"))
    drop_old_state(directory)
    world = write_world(
        directory,
        SCENARIOS[os.environ.get("SCENARIO", "abrupt_decay")],
        start=end - timedelta(days=days),
        end=end,
        seed=int(os.environ.get("SEED", "7")),
        monitor_name=os.environ.get("MONITOR_NAME", "demo"),
        schedule=os.environ.get("SCHEDULE", "5m"),
        listen=os.environ.get("LISTEN", "0.0.0.0:9464"),
    )
    print(f"demo world {world.scenario.name} written to {world.directory}", flush=True)
    os.execvp("monitor", ["monitor", "run", "--config", str(world.config_path)])


if __name__ == "__main__":
    main()
