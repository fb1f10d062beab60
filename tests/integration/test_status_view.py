"""``tessera status`` reads the newest snapshot plus the log after it (not the whole log), keeps
the ended jobs a service keeps, and still counts every job admitted and rejected."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from schemas import JobSpec
from schemas.events import (
    JobAdmitted,
    JobCancelled,
    JobFinished,
    JobPlaced,
    JobRejected,
    JobReserved,
    JobStarted,
    TaskBinding,
)
from shared.cli import stack
from shared.cli.main import app
from shared.eventstore import NewEvent
from shared.eventstore.postgres import PostgresEventStore
from shared.settings import Settings
from shared.state.fold import SNAPSHOT_NAME, ClusterView, to_snapshot
from shared.state.follow import catch_up

pytestmark = pytest.mark.integration


async def _add(store: PostgresEventStore, stream: str, event: object) -> None:
    data = event.model_dump(mode="json", by_alias=True)  # type: ignore[attr-defined]
    version = len(await store.read_stream(stream))
    await store.append([NewEvent(stream, data["type"], data)], {stream: version})


async def test_status_counts_every_job_and_lists_the_kept_ones(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = await PostgresEventStore.connect(fresh_database, max_size=2)
    try:
        for i in range(150):
            spec = JobSpec.model_validate({"id": f"j{i}", "tenant": "t", "resources": {"cpu": "1"}})
            await _add(store, f"job-j{i}", JobAdmitted(spec=spec))
            if i < 120:
                await _add(store, f"job-j{i}", JobCancelled(job_id=f"j{i}"))
            if i == 60:  # a snapshot part way, as a placement worker writes one
                seen = ClusterView(keep_ended=100)
                await catch_up(seen, store)
                await store.save_snapshot(SNAPSHOT_NAME, seen.position, to_snapshot(seen))
        rejected = JobRejected(job_id="bad", code="unknown-queue", reason="no queue 'x'")
        await _add(store, "rejected-bad", rejected)
    finally:
        await store.close()
    view, rejections = await stack.read_view(Settings(database_url=fresh_database, keep_ended_jobs=100))
    assert view.admitted == 150
    assert {j for j, r in view.jobs.items() if r.state == "cancelled"} == {f"j{i}" for i in range(20, 120)}
    assert {j for j, r in view.jobs.items() if r.state == "pending"} == {f"j{i}" for i in range(120, 150)}
    assert rejections == {"bad": "unknown-queue: no queue 'x'"}
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    monkeypatch.setenv("TESSERA_KEEP_ENDED_JOBS", "100")
    # What a placement worker's last cycle said of the waiting jobs (its JSON file).
    monkeypatch.setenv("TESSERA_STATS_DIR", str(tmp_path))
    said = {
        "waiting": {"j149": "QueueMax: its queue would exceed its max"},
        "waiting_kinds": {"QueueMax": 30},
    }
    (tmp_path / "placement-w1.json").write_text(json.dumps(said))
    result = await asyncio.to_thread(CliRunner().invoke, app, ["status", "--jobs", "3"])  # runs its own loop
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    assert "150 admitted, 1 rejected" in shown
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") > 2}
    assert "QueueMax: its queue would exceed its max" in rows["j149"]
    assert "not yet looked at by a placement worker" in rows["j148"]
    assert "waiting, by why (the placement workers' last cycles): 30 QueueMax" in shown


async def test_describe_tells_one_jobs_story_and_why_it_waits(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = await PostgresEventStore.connect(fresh_database, max_size=2)
    try:
        for job in ("done", "waits"):
            spec = JobSpec.model_validate({"id": job, "tenant": "t", "resources": {"nvidia.com/gpu": 2}})
            await _add(store, f"job-{job}", JobAdmitted(spec=spec))
        reserved = JobReserved(job_id="done", nodes=["n1"], expected_start=time.time() + 60, timeout_at=1e12)
        await _add(store, "job-done", reserved)
        binding = TaskBinding(task=0, node="n1", gpus=[0, 1], gpu_milli=1000, cpu_milli=1000, memory_mib=1024)
        await _add(
            store,
            "job-done",
            JobPlaced(job_id="done", bindings=[binding], policy="tessera", node_versions={}),
        )
        await _add(store, "job-done", JobStarted(job_id="done", node="n1"))
        await _add(store, "job-done", JobFinished(job_id="done", node="n1"))
        await _add(
            store, "rejected-bad", JobRejected(job_id="bad", code="unknown-queue", reason="no queue 'x'")
        )
    finally:
        await store.close()
    monkeypatch.setenv("DATABASE_URL", fresh_database)
    monkeypatch.setenv("TESSERA_STATS_DIR", str(tmp_path))
    said = {"waiting": {"waits": "GpuFit: no node has room for gpu=2x1000m"}, "waiting_kinds": {"GpuFit": 1}}
    (tmp_path / "placement-w1.json").write_text(json.dumps(said))

    async def describe(job: str) -> Any:
        return await asyncio.to_thread(CliRunner().invoke, app, ["describe", job])

    done = await describe("done")
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    for what in ("JobAdmitted", "holds n1", "1 task(s) on n1", "JobStarted", "JobFinished", "now: finished"):
        assert what in text, what
    assert "waiting:" not in text
    waits = " ".join((await describe("waits")).output.split())
    assert "now: pending" in waits and "waiting: GpuFit: no node has room for gpu=2x1000m" in waits
    bad = " ".join((await describe("bad")).output.split())
    assert "unknown-queue: no queue 'x'" in bad
    missing = await describe("nobody")
    assert missing.exit_code == 1 and "no job 'nobody' in the event log" in missing.output
