"""The fold of the event log: idempotent, exact after a snapshot, strict about capacity."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from schemas import JobSpec
from schemas.events import (
    JobAdmitted,
    JobCancelled,
    JobFinished,
    JobPlaced,
    JobStarted,
    NodeRegistered,
    TaskBinding,
)
from schemas.node import GpuDevice, NodeInventory
from shared.eventstore import NewEvent
from shared.eventstore.memory import InMemoryEventStore
from shared.eventstore.port import RecordedEvent
from shared.state.fold import SNAPSHOT_NAME, ClusterView, digest, fold, from_snapshot, job_state, to_snapshot
from shared.state.follow import restore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _recorded(events: list[tuple[str, object]]) -> list[RecordedEvent]:
    """The events as the store records them: positions from 1, each stream's versions from 1."""
    versions: dict[str, int] = {}
    out = []
    for position, (stream, event) in enumerate(events, start=1):
        versions[stream] = versions.get(stream, 0) + 1
        data = event.model_dump(mode="json", by_alias=True)  # type: ignore[attr-defined]
        out.append(RecordedEvent(position, stream, versions[stream], data["type"], data, {}, NOW))
    return out


def _log() -> list[RecordedEvent]:
    events: list[tuple[str, object]] = []
    for n in ("a", "b"):
        gpus = [GpuDevice(index=i, model="T4") for i in range(2)]
        events.append(
            (f"node-{n}", NodeRegistered(inventory=NodeInventory(name=n, cpu="8", memory="16Gi", gpus=gpus)))
        )
    for j in ("j1", "j2", "j3"):
        spec = JobSpec.model_validate(
            {"id": j, "tenant": "t", "resources": {"cpu": "2", "nvidia.com/gpu": 1}}
        )
        events.append((f"job-{j}", JobAdmitted(spec=spec)))
    for j, node, gpu in (("j1", "a", 0), ("j2", "a", 1), ("j3", "b", 0)):
        binding = TaskBinding(task=0, node=node, gpus=[gpu], gpu_milli=1000, cpu_milli=2000, memory_mib=1024)
        placed = JobPlaced(job_id=j, bindings=[binding], policy="tessera", node_versions={node: 1})
        events += [(f"job-{j}", placed), (f"node-{node}", placed)]
    events += [
        ("job-j1", JobStarted(job_id="j1", node="a")),
        ("job-j1", JobFinished(job_id="j1", node="a")),
        ("job-j2", JobStarted(job_id="j2", node="a")),
        ("job-j3", JobCancelled(job_id="j3")),
    ]
    return _recorded(events)


def test_the_fold_tracks_jobs_and_frees_resources_on_terminal_events() -> None:
    view = fold(_log())
    assert {j: r.state for j, r in view.jobs.items()} == {
        "j1": "finished",
        "j2": "running",
        "j3": "cancelled",
    }
    assert view.cluster is not None and view.cluster.used_gpu_milli() == 1000  # only j2 holds a GPU
    assert view.node_version("a") == 3


def test_duplicates_and_replays_are_ignored() -> None:
    events = _log()
    view = fold(events)
    before = digest(view)
    assert view.apply_all(events) == 0
    assert digest(view) == before


@pytest.mark.parametrize("cut", range(0, 17, 2))
def test_a_snapshot_plus_the_tail_equals_the_full_replay(cut: int) -> None:
    events = _log()
    body = json.loads(json.dumps(to_snapshot(fold(events[:cut]))))  # through JSON, as stored
    restored = from_snapshot(body)
    restored.apply_all(events[cut:])
    assert digest(restored) == digest(fold(events))


def test_a_log_that_over_commits_a_gpu_cannot_be_replayed() -> None:
    events = _log()
    twin = JobSpec.model_validate({"id": "j9", "tenant": "t", "resources": {"cpu": "1", "nvidia.com/gpu": 1}})
    admitted = JobAdmitted(spec=twin).model_dump(mode="json", by_alias=True)
    binding = TaskBinding(task=0, node="a", gpus=[1], gpu_milli=1000, cpu_milli=1000, memory_mib=1024)
    placed = JobPlaced(job_id="j9", bindings=[binding], policy="x", node_versions={}).model_dump(mode="json")
    n = len(events)
    events += [RecordedEvent(n + 1, "job-j9", 1, "JobAdmitted", admitted, {}, NOW)]
    events += [RecordedEvent(n + 2, "job-j9", 2, "JobPlaced", placed, {}, NOW)]  # GPU a/1 is j2's
    with pytest.raises(ValueError, match="does not fit"):
        ClusterView().apply_all(events)


@pytest.mark.parametrize("cut", range(0, 17))
def test_the_pending_and_active_indexes_agree_with_the_job_states(cut: int) -> None:
    events = _log()
    for view in (fold(events[:cut]), from_snapshot(json.loads(json.dumps(to_snapshot(fold(events[:cut])))))):
        assert [j.spec.id for j in view.pending()] == sorted(
            j for j, r in view.jobs.items() if r.state == "pending"
        )
        assert {j.spec.id for j in view.active()} == {
            j for j, r in view.jobs.items() if r.state in ("placed", "running")
        }


@pytest.mark.parametrize("cut", range(0, 17))
def test_a_job_stream_alone_gives_the_state_and_version_the_fold_gives(cut: int) -> None:
    events = _log()[:cut]
    view = fold(events)
    for job_id, record in view.jobs.items():
        stream = [e for e in events if e.stream == f"job-{job_id}"]
        assert job_state(stream) == (record.state, record.version)
    assert job_state([e for e in events if e.stream == "job-unknown"]) is None


@pytest.mark.parametrize("cut", range(4, 8))
def test_own_events_folded_ahead_then_the_log_in_order_give_the_replayed_state(cut: int) -> None:
    """A worker folds its JobPlaced (job and node stream copies) at once; the log brings it later.

    Only views a worker can have qualify: j2 pending (admitted, not yet placed) when it plans."""
    events = _log()
    admitted = next(i for i, e in enumerate(events) if e.stream == "job-j2")
    own = [e for e in events if e.type == "JobPlaced" and e.data["job_id"] == "j2"]  # job and node copies
    assert admitted < cut <= events.index(own[0])  # the views a worker placing j2 can have
    view = fold(events[:cut])
    view.apply_ahead(own)
    assert view.folded_ahead == 2 and view.position == events[cut - 1].position
    assert view.jobs["j2"].state == "placed" and view.node_version("a") == own[1].version
    view.apply_all(events[cut:])
    assert view.folded_ahead == 0
    assert digest(view) == digest(fold(events))


def _many_ended(count: int) -> list[RecordedEvent]:
    """One 1-GPU node; ``count`` jobs, each placed, started and finished in turn (every third
    cancelled while waiting instead), then one left running."""
    gpus = [GpuDevice(index=0, model="T4")]
    events: list[tuple[str, object]] = [
        ("node-a", NodeRegistered(inventory=NodeInventory(name="a", cpu="8", memory="16Gi", gpus=gpus)))
    ]
    binding = TaskBinding(task=0, node="a", gpus=[0], gpu_milli=1000, cpu_milli=1000, memory_mib=512)
    for i in range(count + 1):
        j = f"j{i}"
        spec = JobSpec.model_validate(
            {"id": j, "tenant": "t", "resources": {"cpu": "1", "nvidia.com/gpu": 1}}
        )
        events.append((f"job-{j}", JobAdmitted(spec=spec)))
        if i % 3 == 2 and i < count:
            events.append((f"job-{j}", JobCancelled(job_id=j)))
            continue
        placed = JobPlaced(job_id=j, bindings=[binding], policy="tessera", node_versions={})
        events += [(f"job-{j}", placed), ("node-a", placed), (f"job-{j}", JobStarted(job_id=j, node="a"))]
        if i < count:
            events.append((f"job-{j}", JobFinished(job_id=j, node="a")))
    return _recorded(events)


def test_a_view_keeps_only_the_jobs_that_ended_last() -> None:
    view = ClusterView(keep_ended=4)
    view.apply_all(_many_ended(30))
    ended = {j: r.state for j, r in view.jobs.items() if j != "j30"}
    assert ended == {"j26": "cancelled", "j27": "finished", "j28": "finished", "j29": "cancelled"}
    assert view.jobs["j30"].state == "running"  # what runs or waits is never let go
    assert view.admitted == 31
    assert view.cluster is not None and view.cluster.used_gpu_milli() == 1000
    # Only node versions are kept: 31 jobs' streams left no trace.
    assert set(view.stream_versions) == {"node-a"}


def test_a_late_event_of_a_job_let_go_changes_nothing() -> None:
    events = _many_ended(10)
    view = ClusterView(keep_ended=2)
    view.apply_all(events)
    before = {k: v for k, v in view.summary().items() if k != "position"}
    late = JobFinished(job_id="j0", node="a").model_dump(mode="json", by_alias=True)
    assert view.apply(RecordedEvent(len(events) + 1, "job-j0", 99, "JobFinished", late, {}, NOW))
    assert "j0" not in view.jobs
    assert {k: v for k, v in view.summary().items() if k != "position"} == before


@pytest.mark.parametrize("cut", [0, 7, 20, 41, 60])
def test_with_ended_jobs_let_go_a_snapshot_plus_the_tail_still_equals_the_full_replay(cut: int) -> None:
    events = _many_ended(20)
    full = ClusterView(keep_ended=3)
    full.apply_all(events)
    head = ClusterView(keep_ended=3)
    head.apply_all(events[:cut])
    restored = from_snapshot(json.loads(json.dumps(to_snapshot(head))), keep_ended=3)
    restored.apply_all(events[cut:])
    assert digest(restored) == digest(full) and restored.admitted == full.admitted == 21


def test_ended_jobs_are_let_go_by_where_they_ended_whatever_order_they_were_folded_in() -> None:
    # Six jobs run at once on a 6-GPU node, then end one after another.
    gpus = [GpuDevice(index=i, model="T4") for i in range(6)]
    events: list[tuple[str, object]] = [
        ("node-a", NodeRegistered(inventory=NodeInventory(name="a", cpu="8", memory="16Gi", gpus=gpus)))
    ]
    for i in range(6):
        spec = JobSpec.model_validate(
            {"id": f"j{i}", "tenant": "t", "resources": {"cpu": "1", "nvidia.com/gpu": 1}}
        )
        binding = TaskBinding(task=0, node="a", gpus=[i], gpu_milli=1000, cpu_milli=1000, memory_mib=512)
        placed = JobPlaced(job_id=f"j{i}", bindings=[binding], policy="tessera", node_versions={})
        events += [(f"job-j{i}", JobAdmitted(spec=spec)), (f"job-j{i}", placed), ("node-a", placed)]
        events.append((f"job-j{i}", JobStarted(job_id=f"j{i}", node="a")))
    events += [(f"job-j{i}", JobFinished(job_id=f"j{i}", node="a")) for i in (3, 0, 5, 1, 4, 2)]
    log = _recorded(events)
    in_order = ClusterView(keep_ended=3)
    in_order.apply_all(log)
    assert set(in_order.jobs) == {"j1", "j4", "j2"}  # the three that ended last
    # A service folds its own appends before the log brings them (apply_ahead), in its order.
    ends = log[-6:]
    ahead = ClusterView(keep_ended=3)
    ahead.apply_all(log[:-6])
    ahead.apply_ahead(reversed(ends))
    ahead.apply_all(log)  # the log catches up: the watermark moves, nothing is folded twice
    assert digest(ahead) == digest(in_order)


async def test_a_snapshot_of_an_older_format_is_passed_over_for_a_replay() -> None:
    store = InMemoryEventStore()
    for e in _many_ended(5):
        await store.append([NewEvent(e.stream, e.type, e.data)], {e.stream: e.version - 1})
    old = {**to_snapshot(fold(await store.read_all(0, 10))), "snapshot_version": 3}
    await store.save_snapshot(SNAPSHOT_NAME, 10, old)
    view = await restore(store, keep_ended=2)  # an upgrade must not stop a service at start
    full = ClusterView(keep_ended=2)
    full.apply_all(await store.read_all(0, 1000))
    assert digest(view) == digest(full) and len(view.jobs) == 3


def test_a_snapshot_of_a_view_that_kept_every_job_can_be_cut_when_restored() -> None:
    everything = fold(_many_ended(10))  # keeps every ended job, and where each ended
    restored = from_snapshot(json.loads(json.dumps(to_snapshot(everything))), keep_ended=2)
    cut = ClusterView(keep_ended=2)
    cut.apply_all(_many_ended(10))
    assert digest(restored) == digest(cut) and len(restored.jobs) == 3


def test_a_class_admission_raised_a_job_to_orders_it_and_survives_a_snapshot() -> None:
    from shared.state.wire import core_job

    small, big = (
        JobSpec.model_validate({"id": j, "tenant": "t", "resources": {"cpu": "2", "nvidia.com/gpu": 1}})
        for j in ("first", "big")
    )
    events = _recorded(
        [("job-first", JobAdmitted(spec=small)), ("job-big", JobAdmitted(spec=big, promoted_class="high"))]
    )
    view = fold(events)
    assert [r.spec.id for r in view.pending()] == ["big", "first"]  # higher first, though later
    restored = from_snapshot(json.loads(json.dumps(to_snapshot(view))))
    for v in (view, restored):
        assert core_job(v.jobs["big"]).priority == 100 and core_job(v.jobs["first"]).priority == 0
