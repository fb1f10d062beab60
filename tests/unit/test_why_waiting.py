"""Why a job waits: the placement cycle says it per job (Slurm's REASON column), the worker
reports it in its JSON file and as a gauge by kind, and ``tessera status`` and ``tessera
describe`` show it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import REGISTRY

from schemas import JobSpec
from schemas.events import JobAdmitted, JobPlaced, JobStarted, NodeRegistered, TaskBinding
from schemas.node import GpuDevice, NodeInventory
from services.placement.handlers import Plan, plan
from services.placement.stats import WAITING_SHOWN, PlacementStats, sentence
from shared.cli.describe import summary
from shared.cli.stack import waiting_reasons
from shared.core.cycle import CycleConfig
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import Code, Status
from shared.core.registry import build_profile
from shared.core.task import TaskShape
from tests.folded_log import T0, Log


def _two_full_nodes(log: Log, priority: int, queue: str = "default") -> None:
    """Nodes a and b of 2 GPUs, each held by a job of ``priority`` in ``queue``."""
    for n in ("a", "b"):
        gpus = [GpuDevice(index=i, model="T4") for i in range(2)]
        inventory = NodeInventory(name=n, cpu="8", memory="16Gi", gpus=gpus)
        log.add(f"node-{n}", NodeRegistered(inventory=inventory))
        body = {"id": f"run-{n}", "tenant": "t", "queue": queue, "priority": priority}
        spec = JobSpec.model_validate({**body, "resources": {"cpu": "1", "nvidia.com/gpu": 2}})
        log.add(f"job-run-{n}", JobAdmitted(spec=spec))
        binding = TaskBinding(task=0, node=n, gpus=[0, 1], gpu_milli=1000, cpu_milli=1000, memory_mib=1024)
        log.add(
            f"job-run-{n}",
            JobPlaced(job_id=f"run-{n}", bindings=[binding], policy="tessera", node_versions={}),
        )
        log.add(f"job-run-{n}", JobStarted(job_id=f"run-{n}", node=n))


def _busy_cluster() -> Log:
    """Two nodes of 2 GPUs, each held by a high-priority job that cannot be evicted."""
    log = Log()
    _two_full_nodes(log, 100)
    for job in ("first", "second"):
        spec = JobSpec.model_validate(
            {"id": job, "tenant": "t", "resources": {"cpu": "1", "nvidia.com/gpu": 2}}
        )
        log.add(f"job-{job}", JobAdmitted(spec=spec))
    return log


def _decide(log: Log) -> Plan:
    profile = build_profile("tessera", TypicalWorkload.from_tasks([TaskShape(1000, 1024, 2, 1000)]))
    return plan(log.view, {"first", "second"}, CycleConfig(profile), T0 + 100, np.random.default_rng(0))


def test_the_cycle_says_per_job_why_it_waits() -> None:
    decided = _decide(_busy_cluster())
    assert list(decided.waiting) == ["first", "second"]  # the cycle's order: the older first
    # EASY's one reservation goes to the head; the other job waits for room.
    assert list(decided.reserved) == ["first"]
    assert decided.reserved["first"].startswith("Reserved: holds 1 node(s) (")
    why = sentence(decided.waiting["second"])
    assert "no node has room for" in why and why.startswith(f"{decided.waiting['second'].plugin}: ")
    # Shown through the worker's report: the holder as reserved, the other by its plugin.
    stats = PlacementStats()
    stats.waiting(decided.waiting, decided.reserved)
    report = stats.report()
    assert report["waiting"] == {"first": decided.reserved["first"], "second": why}
    assert report["waiting_kinds"] == {"Reserved": 1, decided.waiting["second"].plugin: 1}


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_worker_reports_each_jobs_why_and_counts_by_kind() -> None:
    stats = PlacementStats()
    no_room = Status(Code.UNSCHEDULABLE, "GpuFit", "GpuFit: no node has room for gpu=1x1000m")
    quota = Status(Code.UNSCHEDULABLE, "QueueMax", "its queue (or a parent) would exceed its max quota")
    waiting = {f"j{i}": no_room for i in range(WAITING_SHOWN + 5)}
    waiting["q"] = quota
    stats.waiting(waiting, {"j1": "Reserved: holds 2 node(s) (a, b) as they free; starts in ~60 s"})
    report = stats.report()
    assert report["waiting_kinds"] == {"GpuFit": WAITING_SHOWN + 4, "Reserved": 1, "QueueMax": 1}
    shown = report["waiting"]
    assert isinstance(shown, dict) and len(shown) == WAITING_SHOWN  # the first in the cycle's order
    assert shown["j0"] == "GpuFit: no node has room for gpu=1x1000m" and shown["j1"].startswith("Reserved:")
    assert sentence(quota) == "QueueMax: its queue (or a parent) would exceed its max quota"
    assert _sample("tessera_waiting_jobs", {"kind": "GpuFit"}) == WAITING_SHOWN + 4
    # The next cycle replaces it: a kind no job waits for any more goes to zero.
    stats.waiting({"q": quota}, {})
    assert stats.report()["waiting_kinds"] == {"QueueMax": 1}
    assert _sample("tessera_waiting_jobs", {"kind": "GpuFit"}) == 0
    assert _sample("tessera_waiting_jobs", {"kind": "QueueMax"}) == 1


def test_status_merges_what_every_worker_said(tmp_path: Path) -> None:
    (tmp_path / "placement-w1.json").write_text(
        json.dumps({"waiting": {"a": "GpuFit: no room"}, "waiting_kinds": {"GpuFit": 3}})
    )
    (tmp_path / "placement-w2.json").write_text(
        json.dumps({"waiting": {"b": "QueueMax: its queue"}, "waiting_kinds": {"GpuFit": 1, "QueueMax": 1}})
    )
    (tmp_path / "placement-w3.json").write_text("{half written")  # a file being replaced: skipped
    stopped = tmp_path / "placement-w4.json"  # a stopped worker's: not rewritten for a minute
    stopped.write_text(json.dumps({"waiting": {"c": "GpuFit: stale"}, "waiting_kinds": {"GpuFit": 9}}))
    os.utime(stopped, (time.time() - 60, time.time() - 60))
    why, kinds = waiting_reasons(tmp_path)
    assert why == {"a": "GpuFit: no room", "b": "QueueMax: its queue"}
    assert kinds == {"GpuFit": 4, "QueueMax": 1}
    assert waiting_reasons(tmp_path / "absent") == ({}, {})


def test_describe_says_each_event_in_a_line_and_shows_an_unknown_one_as_its_fields() -> None:
    ask = {"by_job": "high", "grace_s": 30.0, "reason": "priority 100 > 0", "resize_to": None}
    assert summary("PreemptionRequested", ask) == "evict for high (grace 30 s): priority 100 > 0"
    assert summary("PreemptionRequested", {**ask, "resize_to": 2, "reason": ""}).startswith(
        "shrink to 2 replica(s)"
    )
    failed = {"task": 1, "node": "n3", "exit_code": 137, "reason": "OOM"}
    assert summary("JobFailed", failed) == "task 1 on n3: exit 137 OOM"
    assert summary("SomethingNew", {"type": "SomethingNew", "job_id": "j", "x": 1}) == "x=1"
    spec = {"queue": "nlp", "tenant": "t", "replicas": 4, "workload": "inference"}
    admitted = {"spec": spec, "promoted_class": None}
    assert summary("JobAdmitted", admitted) == "queue nlp, tenant t, inference, 4 replica(s)"
    named = {**admitted, "spec": {**spec, "name": "llama serving"}}
    assert summary("JobAdmitted", named) == "'llama serving': queue nlp, tenant t, inference, 4 replica(s)"
    assert summary("JobAdmitted", {**admitted, "promoted_class": "high"}).endswith(
        ", class high (the queue's large-jobs rule)"
    )


def test_a_job_waiting_for_its_queues_preempt_after_is_told_when_it_may_preempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from schemas.events import QueuesApplied
    from schemas.queues import QueueTreeSpec

    log = Log()
    tree = {"queues": [{"name": "org", "preempt-after": "24h", "children": [{"name": "a"}, {"name": "b"}]}]}
    log.add("queues", QueuesApplied(tree=QueueTreeSpec.model_validate(tree)))
    _two_full_nodes(log, 0, queue="a")
    for job, priority in (("high", 100), ("equal", 0)):
        body = {
            "id": job,
            "tenant": "t",
            "queue": "b",
            "priority": priority,
            "resources": {"nvidia.com/gpu": 2},
        }
        log.add(f"job-{job}", JobAdmitted(spec=JobSpec.model_validate(body)))
    profile = build_profile("tessera", TypicalWorkload.from_tasks([TaskShape(1000, 1024, 2, 1000)]))
    decided = plan(log.view, {"high", "equal"}, CycleConfig(profile), T0 + 100, np.random.default_rng(0))
    assert set(decided.waiting) == {"high", "equal"}
    assert not [e for e in decided.events if e.type == "PreemptionRequested"]
    # Only the job that outranks running work is told, and when: a day after it was queued.
    assert decided.preempt_at == {"high": T0 + 86400}
    monkeypatch.setattr(time, "time", lambda: T0 + 3700)  # the report says how long from now
    stats = PlacementStats()
    stats.waiting(decided.waiting, decided.reserved, decided.preempt_at)
    shown = stats.report()["waiting"]
    assert isinstance(shown, dict)
    assert shown["high"].endswith("; may preempt lower-priority work in ~23.0 h (its queue's preempt-after)")
    assert "preempt" not in shown["equal"]
