"""What a service's folded view costs as jobs come and go: memory, snapshot size and the time
reading the view for a snapshot holds a placement worker.

    .venv/bin/python loadtests/bench_view_memory.py --jobs 100000

Each job of a synthetic log is admitted, placed on one of 16 8-GPU nodes, started and finished
(the events a real job writes, with its task stream).  The log is folded once keeping every
ended job, as every service did before ``TESSERA_KEEP_ENDED_JOBS``, and once keeping the last
``--keep`` (the setting's default), each in a process of its own so that its peak resident
memory is its own.  Prints a table and ends with one JSON line.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from schemas import JobSpec
from schemas.events import JobAdmitted, JobFinished, JobPlaced, JobStarted, NodeRegistered, TaskBinding
from schemas.node import GpuDevice, NodeInventory
from shared.eventstore.port import RecordedEvent
from shared.settings import Settings
from shared.state.fold import ClusterView, to_snapshot

NODES = 16
AT = datetime(2026, 1, 1, tzinfo=UTC)


def measure(jobs: int, keep: int | None) -> dict[str, object]:
    """Fold ``jobs`` synthetic jobs into a view that keeps ``keep`` ended jobs (None: all)."""
    view = ClusterView(keep_ended=keep)
    position = 0
    versions: dict[str, int] = {}

    def add(stream: str, event: object) -> None:
        nonlocal position
        position += 1
        versions[stream] = versions.get(stream, 0) + 1
        data = event.model_dump(mode="json", by_alias=True)  # type: ignore[attr-defined]
        view.apply(RecordedEvent(position, stream, versions[stream], data["type"], data, {}, AT))

    gpus = [GpuDevice(index=i, model="T4") for i in range(8)]
    for n in range(NODES):
        add(
            f"node-n{n}",
            NodeRegistered(inventory=NodeInventory(name=f"n{n}", cpu="64", memory="256Gi", gpus=gpus)),
        )
    started = time.perf_counter()
    for i in range(jobs):
        job, node = f"job-{i:07d}", f"n{i % NODES}"
        spec = JobSpec.model_validate(
            {"id": job, "tenant": "t", "resources": {"cpu": "2", "nvidia.com/gpu": 1}}
        )
        binding = TaskBinding(task=0, node=node, gpus=[0], gpu_milli=1000, cpu_milli=2000, memory_mib=1024)
        placed = JobPlaced(job_id=job, bindings=[binding], policy="tessera", node_versions={})
        add(f"job-{job}", JobAdmitted(spec=spec))
        add(f"job-{job}", placed)
        add(f"node-{node}", placed)
        for kind in (JobStarted, JobFinished):
            event = kind(job_id=job, node=node)
            add(f"job-{job}", event)
            add(f"task-{job}-0", event)
    fold_s = time.perf_counter() - started
    started = time.perf_counter()
    body = to_snapshot(view)
    read_ms = 1000 * (time.perf_counter() - started)
    return {
        "keep": "all" if keep is None else keep,
        "jobs_kept": len(view.jobs),
        "rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "snapshot_read_ms": round(read_ms),
        "snapshot_mb": round(len(json.dumps(body)) / 1e6, 1),
        "fold_s": round(fold_s, 1),
    }


def main(
    jobs: Annotated[int, typer.Option(help="jobs in the log, every one ended")] = 100_000,
    keep: Annotated[
        int, typer.Option(help="ended jobs kept (TESSERA_KEEP_ENDED_JOBS)")
    ] = Settings().keep_ended_jobs,
    one: Annotated[str, typer.Option(hidden=True, help="internal: measure one setting here")] = "",
) -> None:
    """Fold the same log keeping every ended job and keeping the last ``--keep``; compare."""
    if one:
        print(json.dumps(measure(jobs, None if one == "all" else int(one))))
        return
    rows = []
    for setting in ("all", str(keep)):
        with Console().status(f"folding {jobs:,} jobs, keeping {setting} ended"):
            out = subprocess.run(
                [sys.executable, __file__, "--jobs", str(jobs), "--one", setting],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    table = Table(title=f"a view folded from {jobs:,} ended jobs")
    for column in ("ended jobs kept", "jobs in the view", "peak RSS MiB", "snapshot read ms", "snapshot MB"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            str(r["keep"]),
            f"{r['jobs_kept']:,}",
            str(r["rss_mib"]),
            str(r["snapshot_read_ms"]),
            str(r["snapshot_mb"]),
        )
    Console().print(table)
    print(json.dumps({"jobs": jobs, "runs": rows}))


if __name__ == "__main__":
    typer.run(main)
