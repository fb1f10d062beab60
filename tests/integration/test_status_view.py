"""``tessera status`` reads the newest snapshot plus the log after it (not the whole log), keeps
the ended jobs a service keeps, and still counts every job admitted and rejected."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas import JobSpec
from schemas.events import JobAdmitted, JobCancelled, JobRejected
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
