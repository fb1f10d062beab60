"""The preemption service's decisions and the eviction's path through the job state machine.

A small log is folded into a view; ``decide`` says what to append next; appending its steps
(folded back) walks a preemption, a drain and a lost node to their ends, as the live service does.
"""

from __future__ import annotations

from typing import Any

from schemas import JobSpec
from schemas.events import (
    CancelRequested,
    JobAdmitted,
    JobFinished,
    JobPlaced,
    JobStarted,
    NodeCordoned,
    NodeRegistered,
    PreemptionRequested,
    TaskBinding,
    TaskStopped,
)
from schemas.node import GpuDevice, NodeInventory
from services.preemption.handlers import Knobs, Step, Watch, decide
from shared.core.lifecycle import Phase
from shared.state.fold import from_snapshot, to_snapshot
from tests.folded_log import T0, Log

KNOBS = Knobs(lease_s=30, requeue_after_s=30, stop_report_s=10, grace_s=20)


def _cluster(log: Log) -> None:
    for n in ("a", "b"):
        gpus = [GpuDevice(index=i, model="T4") for i in range(2)]
        log.add(
            f"node-{n}", NodeRegistered(inventory=NodeInventory(name=n, cpu="8", memory="16Gi", gpus=gpus))
        )


def _run(
    log: Log, job: str, node: str, gpus: int = 2, checkpointable: bool = True, priority: int = -100
) -> None:
    spec = JobSpec.model_validate(
        {
            "id": job,
            "tenant": "t",
            "priority": priority,
            "checkpointable": checkpointable,
            "resources": {"cpu": "1", "nvidia.com/gpu": gpus},
        }
    )
    log.add(f"job-{job}", JobAdmitted(spec=spec))
    binding = TaskBinding(
        task=0, node=node, gpus=list(range(gpus)), gpu_milli=1000, cpu_milli=1000, memory_mib=1024
    )
    log.add(f"job-{job}", JobPlaced(job_id=job, bindings=[binding], policy="tessera", node_versions={}))
    log.add(f"job-{job}", JobStarted(job_id=job, node=node))


def _admit_high(log: Log, gpus: int) -> None:
    """A high-priority job ``high`` of ``gpus`` GPUs, waiting."""
    spec = JobSpec.model_validate(
        {"id": "high", "tenant": "t", "priority": 100, "resources": {"nvidia.com/gpu": gpus}}
    )
    log.add("job-high", JobAdmitted(spec=spec))


def _heard(log: Log, at: float) -> dict[str, float]:
    return {n: at for n in log.view.inventories}


def _types(steps: list[Step]) -> list[str]:
    return [e.type for s in steps for e in s.events]


def _victim_asked() -> Log:
    """A running checkpointable ``victim`` on node a, asked to leave for ``high`` (2 GPUs, waiting)."""
    log = Log()
    _cluster(log)
    _run(log, "victim", "a")
    _admit_high(log, gpus=2)
    log.add("job-victim", PreemptionRequested(job_id="victim", by_job="high", grace_s=20, reason="priority"))
    return log


def test_a_requested_preemption_is_evicted_once_stopped_then_requeued_with_its_checkpoint() -> None:
    log = _victim_asked()
    assert log.view.jobs["victim"].leaving(1) == 1  # no longer its queue's, from the request on
    steps = decide(log.view, T0, _heard(log, T0), KNOBS)
    assert _types(steps) == ["EvictionStarted"]
    assert steps[0].events[0].data["deadline"] == T0 + 20
    log.take(steps)
    victim = log.view.jobs["victim"]
    assert victim.status.evicting and victim.state == "preempting"
    # The eviction is not taken twice, and nothing more happens until the task has stopped.
    assert decide(log.view, T0 + 1, _heard(log, T0 + 1), KNOBS) == []
    log.add(
        "job-victim",
        TaskStopped(job_id="victim", node="a", checkpointed=True, ran_s=700.0),
    )
    assert log.view.cluster is not None and log.view.cluster.gpu_free[0].sum() == 2000  # room freed
    steps = decide(log.view, T0 + 2, _heard(log, T0 + 2), KNOBS)
    assert _types(steps) == ["JobPreempted"]
    assert steps[0].events[0].data["checkpointed"] and steps[0].events[0].data["work_lost_s"] == 0.0
    log.take(steps)
    victim = log.view.jobs["victim"]
    assert victim.state == "pending" and victim.status.attempt == 1 and victim.resume
    assert victim.status.preemptions == 1


def test_a_preemption_whose_preemptor_no_longer_waits_is_abandoned_and_the_victim_runs_on() -> None:
    log = Log()
    _cluster(log)
    _run(log, "victim", "a")
    _run(log, "high", "b", priority=100)  # placed elsewhere meanwhile
    log.add("job-victim", PreemptionRequested(job_id="victim", by_job="high", grace_s=20))
    steps = decide(log.view, T0, _heard(log, T0), KNOBS)
    assert _types(steps) == ["PreemptionAbandoned"]
    log.take(steps)
    assert log.view.jobs["victim"].state == "running"


def test_a_drain_evicts_the_nodes_jobs_and_ends_with_node_drained() -> None:
    log = Log()
    _cluster(log)
    _run(log, "on-a", "a", checkpointable=False)
    _run(log, "on-b", "b")
    log.add("node-a", NodeCordoned(node="a", reason="maintenance"))
    assert log.view.cluster is not None and not log.view.cluster.schedulable[0]
    steps = decide(log.view, T0, _heard(log, T0), KNOBS)
    assert _types(steps) == ["EvictionStarted"]
    assert steps[0].events[0].data["job_id"] == "on-a" and steps[0].events[0].data["grace_s"] == 0.0
    log.take(steps)
    log.add("job-on-a", TaskStopped(job_id="on-a", node="a", killed=True, ran_s=50.0))
    steps = decide(log.view, T0 + 1, _heard(log, T0 + 1), KNOBS)
    assert _types(steps) == ["JobPreempted"]
    assert steps[0].events[0].data["work_lost_s"] == 50.0 and not steps[0].events[0].data["checkpointed"]
    log.take(steps)
    assert log.view.jobs["on-a"].status.preemptions == 0  # a drain is not the job's doing
    steps = decide(log.view, T0 + 2, _heard(log, T0 + 2), KNOBS)
    assert _types(steps) == ["NodeDrained"]
    log.take(steps)
    assert decide(log.view, T0 + 3, _heard(log, T0 + 3), KNOBS) == []
    assert log.view.jobs["on-b"].state == "running"


def test_a_silent_node_goes_not_ready_then_its_jobs_are_requeued_and_it_may_come_back() -> None:
    log = Log()
    _cluster(log)
    _run(log, "lost", "a")
    heard = {"a": T0, "b": T0 + 100}
    assert decide(log.view, T0 + 29, heard, KNOBS) == []
    steps = decide(log.view, T0 + 31, heard, KNOBS)
    assert _types(steps) == ["NodeNotReady"]
    log.clock = T0 + 31
    log.take(steps)
    assert log.view.cluster is not None and not log.view.cluster.schedulable[0]
    assert decide(log.view, T0 + 50, heard, KNOBS) == []  # the requeue timeout has not passed
    steps = decide(log.view, T0 + 62, heard, KNOBS)
    assert _types(steps) == ["EvictionStarted"]
    log.take(steps)
    # Nobody can report the task: after its grace and the report timeout it counts as lost.
    assert decide(log.view, T0 + 62 + 20 + 5, heard, KNOBS) == []
    steps = decide(log.view, T0 + 62 + 20 + 11, heard, KNOBS)
    assert _types(steps) == ["JobPreempted"]
    assert not steps[0].events[0].data["checkpointed"]
    log.take(steps)
    assert log.view.jobs["lost"].state == "pending" and log.view.cluster.gpu_free[0].sum() == 2000
    heard["a"] = heard["b"] = T0 + 200  # its agent is back
    steps = decide(log.view, T0 + 201, heard, KNOBS)
    assert _types(steps) == ["NodeReady"]
    log.take(steps)
    assert log.view.cluster.schedulable[0]


def test_eviction_state_survives_a_snapshot() -> None:
    log = Log()
    _cluster(log)
    _run(log, "victim", "a")
    log.add("node-b", NodeCordoned(node="b"))
    log.add("job-victim", PreemptionRequested(job_id="victim", by_job="gone", grace_s=5))
    again = from_snapshot(to_snapshot(log.view))
    assert again.jobs["victim"].status.phase == Phase.PREEMPTING
    assert again.jobs["victim"].request == log.view.jobs["victim"].request
    assert again.cluster is not None and not again.cluster.schedulable[again.cluster.index["b"]]
    assert _types(decide(again, T0, _heard(log, T0), KNOBS)) == _types(
        decide(log.view, T0, _heard(log, T0), KNOBS)
    )


def _what(steps: list[Step]) -> list[tuple[str, ...]]:
    return [(s.what, *(e.type for e in s.events)) for s in steps]


def test_the_kept_watch_decides_what_a_full_rescan_decides() -> None:
    """The service keeps one Watch across calls (fed by the view's changed jobs); each call's
    steps must equal a fresh rescan's, through a preemption, a drain and a lost node."""
    log = Log()
    _cluster(log)
    watch = Watch(sweep_s=0.0)
    heard = {"a": T0, "b": T0}

    def step(now: float) -> list[Step]:
        kept = decide(log.view, now, heard, KNOBS, watch)
        assert _what(kept) == _what(decide(log.view, now, heard, KNOBS))
        streams = [name for s in kept for name in s.expected]
        assert len(streams) == len(set(streams))  # one append may carry them all (app.act)
        log.clock = now
        log.take(kept)
        return kept

    _run(log, "victim", "a")
    _run(log, "on-b", "b", gpus=1)
    _admit_high(log, gpus=2)
    log.add("job-victim", PreemptionRequested(job_id="victim", by_job="high", grace_s=5, reason="priority"))
    assert _types(step(T0)) == ["EvictionStarted"]
    log.add(
        "job-victim", TaskStopped(job_id="victim", node="a", task=0, attempt=0, checkpointed=True, ran_s=3.0)
    )
    assert _types(step(T0 + 1)) == ["JobPreempted"]
    watch.update(log.view)
    assert watch.inflight == {} and "victim" not in watch.on_node.get("a", {})
    log.add("node-b", NodeCordoned(node="b"))
    assert _types(step(T0 + 2)) == ["EvictionStarted"]
    log.add("job-on-b", TaskStopped(job_id="on-b", node="b", task=0, attempt=0, checkpointed=True, ran_s=2.0))
    assert _types(step(T0 + 3)) == ["JobPreempted"]
    assert _types(step(T0 + 4)) == ["NodeDrained"]
    _run(log, "late", "a")
    heard["b"] = T0 + 100
    assert _types(step(T0 + 40)) == ["NodeNotReady"]
    assert _types(step(T0 + 71)) == ["EvictionStarted"]
    watch.update(log.view)
    assert watch.inflight == {"late": None}


def test_a_lease_is_checked_once_per_sweep_not_on_every_change() -> None:
    log = Log()
    _cluster(log)
    watch = Watch(sweep_s=5.0)
    heard = {"a": T0, "b": T0}
    assert decide(log.view, T0 + 1, heard, KNOBS, watch) == []  # the first call sweeps
    assert decide(log.view, T0 + 31.5, heard, KNOBS, watch) != []  # 30.5 s later: a sweep is due
    watch = Watch(sweep_s=5.0)
    assert decide(log.view, T0 + 29, heard, KNOBS, watch) == []
    assert decide(log.view, T0 + 31, heard, KNOBS, watch) == []  # expired, but no sweep yet
    assert _types(decide(log.view, T0 + 34, heard, KNOBS, watch)) == ["NodeNotReady", "NodeNotReady"]


def test_a_node_never_heard_counts_as_heard_at_the_service_start() -> None:
    from schemas.node import NodeHeartbeat
    from services.preemption.app import Leases

    leases = Leases(since=T0)
    leases.renew(NodeHeartbeat.model_validate({"agent": "x", "nodes": ["a"], "at": T0 + 5}), T0 + 5)
    assert leases.get("a", 0.0) == T0 + 5 and leases.get("b", 0.0) == T0 and leases["b"] == T0


def test_leases_do_not_age_while_kafka_is_out_of_reach() -> None:
    """No agent can be heard while the heartbeat topic is out of reach: that silence must not
    declare nodes lost (every running job would be evicted by a Kafka restart)."""
    from schemas.node import NodeHeartbeat
    from services.preemption.app import Leases

    log = Log()
    _cluster(log)
    leases = Leases(since=T0)
    leases.renew(NodeHeartbeat.model_validate({"agent": "x", "nodes": ["a", "b"], "at": T0}), T0)
    leases.bus(T0 + 10, reachable=False)  # Kafka goes down; the probes keep failing
    leases.bus(T0 + 40, reachable=False)
    assert (
        decide(log.view, T0 + 45, leases, KNOBS, Watch(sweep_s=0.0)) == []
    )  # 45 s silent, 5 s of them counted
    leases.bus(T0 + 100, reachable=True)  # back: a fresh lease from now, beats are on their way
    assert decide(log.view, T0 + 125, leases, KNOBS, Watch(sweep_s=0.0)) == []
    steps = decide(log.view, T0 + 131, leases, KNOBS, Watch(sweep_s=0.0))  # still silent 31 s after
    assert _types(steps) == ["NodeNotReady", "NodeNotReady"]


def _elastic(log: Log, job: str, node: str, elastic: str = "1:2", priority: int = -100) -> None:
    """A checkpointable elastic job of 1-GPU replicas (``elastic``: min:max) running two on ``node``."""
    spec = JobSpec.model_validate(
        {
            "id": job,
            "tenant": "t",
            "priority": priority,
            "checkpointable": True,
            "replicas": int(elastic.split(":")[1]),
            "elastic": elastic,
            "resources": {"cpu": "1", "nvidia.com/gpu": 1},
        }
    )
    log.add(f"job-{job}", JobAdmitted(spec=spec))
    bindings = [
        TaskBinding(task=t, node=node, gpus=[t], gpu_milli=1000, cpu_milli=1000, memory_mib=1024)
        for t in (0, 1)
    ]
    log.add(f"job-{job}", JobPlaced(job_id=job, bindings=bindings, policy="tessera", node_versions={}))
    for t in (0, 1):
        log.add(f"job-{job}", JobStarted(job_id=job, node=node, task=t))


def _shrink_requested() -> Log:
    """A 2-replica elastic job on node a, asked to shrink to 1 for a 1-GPU high-priority job."""
    log = Log()
    _cluster(log)
    _elastic(log, "el", "a")
    _admit_high(log, gpus=1)
    log.add("job-el", PreemptionRequested(job_id="el", by_job="high", grace_s=5, resize_to=1))
    return log


def test_a_shrink_stops_every_task_then_restarts_the_kept_ones_on_the_room_they_held() -> None:
    log = _shrink_requested()
    assert log.view.jobs["el"].activity == "shrinking 2->1"
    assert log.view.jobs["el"].leaving(2) == 1  # its queue's usage keeps the replica that stays
    steps = decide(log.view, T0, _heard(log, T0), KNOBS)
    assert _types(steps) == ["EvictionStarted"] and steps[0].events[0].data["resize_to"] == 1
    log.take(steps)
    for t in (0, 1):
        log.add("job-el", TaskStopped(job_id="el", node="a", task=t, checkpointed=True, ran_s=4.0))
    cluster = log.view.cluster
    assert cluster is not None
    # Task 1's GPU is free for the preemptor; task 0's stays held for the restart.
    assert cluster.gpu_free[cluster.index["a"]].tolist() == [0, 1000]
    again = from_snapshot(to_snapshot(log.view))
    assert again.cluster is not None and again.cluster.gpu_free[again.cluster.index["a"]].tolist() == [
        0,
        1000,
    ]
    steps = decide(log.view, T0 + 1, _heard(log, T0 + 1), KNOBS)
    assert _types(steps) == ["JobResized"]
    body = steps[0].events[0].data
    assert body["replicas"] == 1 and [b["task"] for b in body["bindings"]] == [0] and body["checkpointed"]
    log.take(steps)
    record = log.view.jobs["el"]
    assert record.state == "placed" and record.status.attempt == 1 and record.status.preemptions == 0
    assert record.resume and [b.task for b in record.bindings] == [0]
    assert cluster.gpu_free[cluster.index["a"]].tolist() == [0, 1000]  # nothing freed or taken twice
    assert decide(log.view, T0 + 2, _heard(log, T0 + 2), KNOBS) == []


def test_a_shrink_whose_kept_task_is_lost_sends_the_whole_job_back_to_the_queue() -> None:
    log = _shrink_requested()
    log.take(decide(log.view, T0, _heard(log, T0), KNOBS))
    log.add("job-el", TaskStopped(job_id="el", node="a", task=1, checkpointed=True, ran_s=4.0))
    log.add("job-el", JobFinished(job_id="el", node="a", task=0))  # ended on its own meanwhile
    steps = decide(log.view, T0 + 1, _heard(log, T0 + 1), KNOBS)
    assert _types(steps) == ["JobPreempted"]
    log.take(steps)
    cluster = log.view.cluster
    assert cluster is not None and cluster.gpu_free[cluster.index["a"]].tolist() == [1000, 1000]


def test_the_placement_cycle_asks_an_elastic_job_to_shrink_rather_than_evicting_it() -> None:
    import numpy as np

    from services.placement.handlers import plan
    from shared.core.cycle import CycleConfig
    from shared.core.fragmentation import TypicalWorkload
    from shared.core.registry import build_profile
    from shared.core.task import TaskShape

    log = Log()
    _cluster(log)
    _elastic(log, "el", "a")
    _run(log, "whole", "b")  # a 2-GPU best-effort job: evicting it would free room too
    _admit_high(log, gpus=1)
    profile = build_profile("bestfit", TypicalWorkload.from_tasks([TaskShape(1000, 1024, 1, 1000)]))
    config = CycleConfig(profile, elastic=False, min_runtime_s=0, grace_s=7)
    decision = plan(log.view, {"high"}, config, T0 + 100, np.random.default_rng(0))
    requests = [e for e in decision.events if e.type == "PreemptionRequested"]
    assert [(e.stream, e.data["resize_to"], e.data["grace_s"]) for e in requests] == [("job-el", 1, 7.0)]
    assert any(e.type == "JobReserved" and e.data["preemption"] for e in decision.events)


def test_cpu_replicas_are_shrunk_too_though_no_gpu_time_is_lost_either_way() -> None:
    """CPU jobs lose 0 GPU-seconds whether shrunk or evicted: the tie goes to the shrink, and
    two shrinks of one job count as one victim (it was evicting the whole job before)."""
    import numpy as np

    from services.placement.handlers import plan
    from shared.core.cycle import CycleConfig
    from shared.core.fragmentation import TypicalWorkload
    from shared.core.registry import build_profile
    from shared.core.task import TaskShape

    log = Log()
    log.add("node-c", NodeRegistered(inventory=NodeInventory(name="c", cpu="4", memory="16Gi")))
    spec = JobSpec.model_validate(
        {
            "id": "el",
            "tenant": "t",
            "priority": -100,
            "checkpointable": True,
            "replicas": 4,
            "elastic": "2:4",
            "resources": {"cpu": "1", "memory": "1Gi"},
        }
    )
    log.add("job-el", JobAdmitted(spec=spec))
    bindings = [
        TaskBinding(task=t, node="c", gpus=[], gpu_milli=0, cpu_milli=1000, memory_mib=1024) for t in range(4)
    ]
    log.add("job-el", JobPlaced(job_id="el", bindings=bindings, policy="tessera", node_versions={}))
    high = JobSpec.model_validate({"id": "high", "tenant": "t", "priority": 100, "resources": {"cpu": "2"}})
    log.add("job-high", JobAdmitted(spec=high))
    profile = build_profile("bestfit", TypicalWorkload.from_tasks([TaskShape(2000, 1024)]))
    decision = plan(
        log.view, {"high"}, CycleConfig(profile, elastic=False, min_runtime_s=0), T0, np.random.default_rng(0)
    )
    requests = [e.data for e in decision.events if e.type == "PreemptionRequested"]
    assert [(r["job_id"], r["resize_to"]) for r in requests] == [("el", 2)]


def _grow_config(grace_s: float = 7.0) -> Any:
    from shared.core.cycle import CycleConfig
    from shared.core.fragmentation import TypicalWorkload
    from shared.core.registry import build_profile
    from shared.core.task import TaskShape

    profile = build_profile("bestfit", TypicalWorkload.from_tasks([TaskShape(1000, 1024, 1, 1000)]))
    return CycleConfig(profile, min_runtime_s=0, grace_s=grace_s)


def _grow_requested() -> Log:
    """Node b is idle: the placement cycle grows the elastic job onto it."""
    import numpy as np

    from services.placement.handlers import plan

    log = Log()
    _cluster(log)
    _elastic(log, "el", "a", elastic="2:4", priority=0)
    decision = plan(log.view, {"el"}, _grow_config(), T0 + 100, np.random.default_rng(0))
    assert [(e.stream, e.type) for e in decision.events] == [
        ("job-el", "JobGrowRequested"),
        ("node-b", "JobGrowRequested"),
    ]
    for events, expected, _ in decision.chunks(50):
        # and the queue tree's stream as read (none applied: no stream yet)
        assert expected == {"job-el": log.versions["job-el"], "node-b": log.versions["node-b"], "queues": 0}
        for e in events:
            log.append_raw(e.stream, e.data)
    return log


def _free_gpus(log: Log, node: str) -> list[int]:
    cluster = log.view.cluster
    assert cluster is not None
    return [int(g) for g in cluster.gpu_free[cluster.index[node]]]


def test_a_grow_takes_its_room_at_once_restarts_every_task_and_runs_at_the_new_size() -> None:
    log = _grow_requested()
    record = log.view.jobs["el"]
    grow = record.request
    assert grow is not None and grow["replicas"] == 4 and grow["grace_s"] == 7.0
    assert [(b.task, b.node) for b in record.growing] == [(2, "b"), (3, "b")]
    assert record.state == "preempting" and _free_gpus(log, "b") == [0, 0]  # taken at once
    assert record.activity == "growing 2->4"  # what `tessera status` shows
    assert record.leaving(4) == 0  # the added room is the job's, and so its queue's
    again = from_snapshot(to_snapshot(log.view))  # a restart mid-grow holds the same room
    assert again.cluster is not None and [
        int(g) for g in again.cluster.gpu_free[again.cluster.index["b"]]
    ] == [0, 0]
    steps = decide(log.view, T0 + 101, _heard(log, T0 + 101), KNOBS)
    assert _types(steps) == ["EvictionStarted"]
    body = steps[0].events[0].data
    assert body["resize_to"] == 4 and body["by_job"] == "" and body["grace_s"] == 7.0
    log.take(steps)
    for t in (0, 1):
        log.add("job-el", TaskStopped(job_id="el", node="a", task=t, checkpointed=True, ran_s=50.0))
    assert _free_gpus(log, "a") == [0, 0]  # the old replicas keep their room while they restart
    steps = decide(log.view, T0 + 102, _heard(log, T0 + 102), KNOBS)
    assert _types(steps) == ["JobResized"]
    body = steps[0].events[0].data
    assert body["replicas"] == 4 and body["checkpointed"]
    assert [(b["task"], b["node"]) for b in body["bindings"]] == [(0, "a"), (1, "a"), (2, "b"), (3, "b")]
    log.take(steps)
    record = log.view.jobs["el"]
    assert record.state == "placed" and record.status.attempt == 1 and record.status.tasks == 4
    assert record.resume and record.growing == [] and record.status.preemptions == 0
    assert _free_gpus(log, "a") == [0, 0] and _free_gpus(log, "b") == [0, 0]  # nothing taken twice
    assert decide(log.view, T0 + 103, _heard(log, T0 + 103), KNOBS) == []
    # At its full size it grows no more.
    import numpy as np

    from services.placement.handlers import plan

    assert plan(log.view, {"el"}, _grow_config(), T0 + 200, np.random.default_rng(0)).events == []


def test_a_grow_onto_a_node_cordoned_before_it_starts_is_abandoned_and_gives_the_room_back() -> None:
    log = _grow_requested()
    log.add("node-b", NodeCordoned(node="b", drain=False))
    steps = decide(log.view, T0 + 101, _heard(log, T0 + 101), KNOBS)
    assert _types(steps) == ["PreemptionAbandoned"]
    log.take(steps)
    record = log.view.jobs["el"]
    assert record.state == "running" and record.growing == [] and len(record.bindings) == 2
    assert _free_gpus(log, "b") == [1000, 1000]


def test_a_job_that_ends_while_its_grow_waits_gives_the_added_room_back() -> None:
    log = _grow_requested()
    for t in (0, 1):
        log.add("job-el", JobFinished(job_id="el", node="a", task=t))
    assert log.view.jobs["el"].state == "finished"
    assert _free_gpus(log, "a") == [1000, 1000] and _free_gpus(log, "b") == [1000, 1000]
    assert decide(log.view, T0 + 101, _heard(log, T0 + 101), KNOBS) == []


def test_a_kept_snapshot_builder_sees_every_change_a_fresh_one_sees() -> None:
    """The placement worker's builder keeps its running jobs between cycles and looks again only
    at the jobs the view's change feed names: through a grow, its eviction, a resize and a job's
    end, each of its snapshots must hold what a snapshot built from scratch holds."""
    from shared.state.snapshot import SnapshotBuilder, build_snapshot

    log = Log()
    _cluster(log)
    _elastic(log, "el", "a", elastic="2:4", priority=0)
    kept = SnapshotBuilder()

    def same() -> None:
        now = log.clock
        a, b = kept.build(log.view, now), build_snapshot(log.view, now)
        assert a is not None and b is not None
        assert sorted((r.job.id, r.placements, r.preempting) for r in a.running) == sorted(
            (r.job.id, r.placements, r.preempting) for r in b.running
        )

    same()
    _run(log, "other", "b", gpus=1)
    same()
    import numpy as np

    from services.placement.handlers import plan

    for e in plan(log.view, {"el"}, _grow_config(), T0 + 100, np.random.default_rng(0), builder=kept).events:
        log.append_raw(e.stream, e.data)
    same()
    log.take(decide(log.view, T0 + 101, _heard(log, T0 + 101), KNOBS))
    for t in (0, 1):
        log.add("job-el", TaskStopped(job_id="el", node="a", task=t, checkpointed=True, ran_s=5.0))
    same()
    log.add("job-other", JobFinished(job_id="other", node="b"))
    same()
    log.take(decide(log.view, T0 + 102, _heard(log, T0 + 102), KNOBS))
    same()
    assert [r.job.id for r in build_snapshot(log.view, log.clock).running] == ["el"]  # type: ignore[union-attr]


def test_a_cancel_of_a_running_job_stops_its_tasks_before_its_room_is_given_back() -> None:
    log = Log()
    _cluster(log)
    _run(log, "job", "a")
    log.add("job-job", CancelRequested(job_id="job", reason="not needed"))
    job = log.view.jobs["job"]
    assert job.state == "running" and job.cancelling == "not needed" and job.activity == "cancelling"
    assert log.view.cluster is not None and log.view.cluster.gpu_free[0].sum() == 0  # still held
    assert from_snapshot(to_snapshot(log.view)).jobs["job"].cancelling == "not needed"  # a restart keeps it
    steps = decide(log.view, T0, _heard(log, T0), KNOBS)
    assert _types(steps) == ["EvictionStarted"]
    started = steps[0].events[0].data
    assert started["reason"] == "cancelled: not needed" and started["by_job"] == ""
    assert started["grace_s"] == 20  # a checkpointable job saves its work, as in a drain
    log.take(steps)
    assert decide(log.view, T0 + 1, _heard(log, T0 + 1), KNOBS) == []  # until its task has stopped
    log.add("job-job", TaskStopped(job_id="job", node="a", checkpointed=True, ran_s=30.0))
    steps = decide(log.view, T0 + 2, _heard(log, T0 + 2), KNOBS)
    assert _types(steps) == ["JobCancelled"]
    log.take(steps)
    assert log.view.jobs["job"].state == "cancelled"
    assert log.view.cluster.gpu_free[0].sum() == 2000
    assert decide(log.view, T0 + 3, _heard(log, T0 + 3), KNOBS) == []


def test_a_job_cancelled_while_it_is_being_preempted_ends_cancelled_not_requeued() -> None:
    log = _victim_asked()
    log.take(decide(log.view, T0, _heard(log, T0), KNOBS))  # EvictionStarted
    log.add("job-victim", CancelRequested(job_id="victim"))
    assert decide(log.view, T0 + 1, _heard(log, T0 + 1), KNOBS) == []  # one eviction, not two
    log.add("job-victim", TaskStopped(job_id="victim", node="a", checkpointed=True, ran_s=700.0))
    steps = decide(log.view, T0 + 2, _heard(log, T0 + 2), KNOBS)
    assert _types(steps) == ["JobCancelled"]
    log.take(steps)
    assert log.view.jobs["victim"].state == "cancelled"


def test_a_cancel_of_a_job_on_a_lost_node_ends_once_its_task_is_counted_lost() -> None:
    log = Log()
    _cluster(log)
    _run(log, "job", "a", checkpointable=False)
    log.add("job-job", CancelRequested(job_id="job"))
    log.take(decide(log.view, T0, _heard(log, T0), KNOBS))  # EvictionStarted, deadline T0
    heard = {"a": T0 - 100.0, "b": T0 + 50}  # node a's agent is gone
    steps = decide(log.view, T0 + 50, heard, KNOBS)
    assert "NodeNotReady" in _types(steps) and "JobCancelled" not in _types(steps)
    log.take(steps)
    steps = decide(log.view, T0 + 50 + KNOBS.stop_report_s, heard, KNOBS)
    assert "JobCancelled" in _types(steps)
    log.take(steps)
    assert log.view.jobs["job"].state == "cancelled"
    assert log.view.cluster is not None and log.view.cluster.gpu_free[0].sum() == 2000
