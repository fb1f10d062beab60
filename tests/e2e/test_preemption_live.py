"""Preemption, eviction, node liveness and drain live: real Kafka, PostgreSQL and processes.

Each test runs its own stack (relay, admission, preemption service, placement worker, agents)
on its own database and topic prefix, with timeouts shortened through the settings' environment.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from loadtests.live_stack import LiveStack, log_of
from schemas import CancelJob, DrainNode, JobSpec, UncordonNode
from shared.cli import stack
from shared.eventstore.port import RecordedEvent

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "examples" / "checkpoint_job.py")
FAST = {
    "TESSERA_PREEMPT_MIN_RUNTIME_S": "0",
    "TESSERA_PREEMPT_GRACE_S": "6",
    "TESSERA_HEARTBEAT_S": "0.5",
    "TESSERA_LEASE_S": "3",
    "TESSERA_REQUEUE_AFTER_S": "2",
    "TESSERA_STOP_REPORT_S": "1",
}


def process_job(job_id: str, priority: str, *args: str, checkpointable: bool = True) -> JobSpec:
    """A job taking this whole machine's CPUs (the process agent's one node)."""
    import os

    return JobSpec.model_validate(
        {
            "id": job_id,
            "tenant": "t",
            "priority-class": priority,
            "checkpointable": checkpointable,
            "resources": {"cpu": str(len(os.sched_getaffinity(0))), "memory": "64Mi"},
            "command": [sys.executable, JOB, *args],
        }
    )


async def start_process_stack(live: LiveStack, metrics: bool = False) -> None:
    live.env.update(FAST)
    await live.standard(workers=1, agent=["--mode", "process", "--name", "box"], metrics=metrics)


async def wait_log(live: LiveStack, found: object, timeout: float = 60.0) -> list[RecordedEvent]:
    """Poll the log until ``found(events)`` is true; returns the log."""
    deadline = time.time() + timeout
    while True:
        events = await log_of(live.settings.database_url)
        if found(events):  # type: ignore[operator]
            return events
        assert time.time() < deadline, [(e.stream, e.type) for e in events[-30:]]
        await asyncio.sleep(0.2)


def kinds(events: list[RecordedEvent], stream: str) -> list[str]:
    return [e.type for e in events if e.stream == stream]


def has(kind: str, stream: str) -> object:
    return lambda events: kind in kinds(events, stream)


async def test_a_high_priority_job_evicts_a_checkpointing_victim_which_resumes_later(
    live: LiveStack, tmp_path: Path
) -> None:
    await start_process_stack(live, metrics=True)
    low = process_job("low", "best-effort", "--steps", "40", "--step-s", "0.25")
    await stack.submit([low], live.settings)
    await wait_log(live, has("JobStarted", "job-low"))
    await asyncio.sleep(1.0)  # a few steps done
    assert live.scrape("agent")[("tessera_agent_tasks_running", ())] == 1
    high = process_job("high", "high", "--steps", "4", "--step-s", "0.25")
    await stack.submit([high], live.settings)
    states = await live.wait_terminal(["high", "low"], timeout=120)
    assert states == {"high": "finished", "low": "finished"}
    events = await log_of(live.settings.database_url)
    low_kinds = kinds(events, "job-low")
    for step in ("PreemptionRequested", "EvictionStarted", "TaskStopped", "JobPreempted"):
        assert low_kinds.count(step) == 1, low_kinds
    stopped = next(e for e in events if e.stream == "job-low" and e.type == "TaskStopped")
    preempted = next(e for e in events if e.stream == "job-low" and e.type == "JobPreempted")
    assert stopped.data["checkpointed"] and not stopped.data["killed"]
    assert preempted.data["checkpointed"] and preempted.data["by_job"] == "high"
    # The preemptor started after the victim left; the victim started again after the preemptor.
    high_start = next(e.position for e in events if e.stream == "job-high" and e.type == "JobStarted")
    starts = [e for e in events if e.stream == "job-low" and e.type == "JobStarted"]
    assert [e.data["attempt"] for e in starts] == [0, 1]
    assert preempted.position < high_start < starts[1].position
    # What the job's processes saw: the checkpoint, TESSERA_RESUME and TESSERA_ATTEMPT.
    folder = tmp_path / "checkpoints" / "low"
    first = json.loads((folder / "attempt-0.json").read_text())
    second = json.loads((folder / "attempt-1.json").read_text())
    assert not first["resume"] and second["resume"] and second["from_step"] > 0
    assert json.loads((folder / "done.json").read_text()) == {"step": 40, "attempt": 1}
    # The preemption's steps, as each service's Prometheus counters tell them.
    asked = live.scrape("placement-1")[("tessera_placement_events_total", (("type", "PreemptionRequested"),))]
    assert asked == 1
    carried = live.scrape("preemption")
    for kind in ("EvictionStarted", "JobPreempted"):
        assert carried[("tessera_preemption_events_total", (("type", kind),))] == 1
    agent = live.scrape("agent")
    assert agent[("tessera_agent_tasks_started_total", ())] == 3  # low, high, low again
    assert agent[("tessera_agent_task_ends_total", (("type", "TaskStopped"),))] == 1
    assert agent[("tessera_agent_task_ends_total", (("type", "JobFinished"),))] == 2
    assert agent[("tessera_agent_tasks_running", ())] == 0


async def test_a_victim_that_ignores_sigterm_is_killed_after_its_grace(live: LiveStack) -> None:
    await start_process_stack(live)
    stubborn = process_job(
        "stubborn", "best-effort", "--steps", "400", "--step-s", "0.25", "--ignore-sigterm"
    )
    await stack.submit([stubborn], live.settings)
    await wait_log(live, has("JobStarted", "job-stubborn"))
    await stack.submit([process_job("high", "high", "--steps", "2")], live.settings)
    events = await wait_log(live, has("JobPreempted", "job-stubborn"), timeout=60)
    eviction = next(e for e in events if e.stream == "job-stubborn" and e.type == "EvictionStarted")
    stopped = next(e for e in events if e.stream == "job-stubborn" and e.type == "TaskStopped")
    assert stopped.data["killed"] and not stopped.data["checkpointed"]
    # Killed at the deadline, not before: its whole grace was given.
    waited = (stopped.recorded_at - eviction.recorded_at).total_seconds()
    assert eviction.data["grace_s"] == 6.0 and 5.5 <= waited <= 12.0
    states = await live.wait_terminal(["high"], timeout=60)
    assert states["high"] == "finished"


async def test_the_preemption_service_killed_mid_eviction_resumes_it_from_the_log(live: LiveStack) -> None:
    await start_process_stack(live)
    low = process_job("low", "best-effort", "--steps", "40", "--step-s", "0.25", "--save-s", "2.5")
    await stack.submit([low], live.settings)
    await wait_log(live, has("JobStarted", "job-low"))
    await stack.submit([process_job("high", "high", "--steps", "2")], live.settings)
    await wait_log(live, has("EvictionStarted", "job-low"))
    await live.kill("preemption")  # while the victim writes its 2.5-s checkpoint
    await asyncio.sleep(3.5)
    events = await log_of(live.settings.database_url)
    assert "JobPreempted" not in kinds(events, "job-low")  # nobody finished it meanwhile
    await live.restart("preemption")
    states = await live.wait_terminal(["high", "low"], timeout=120)
    assert states == {"high": "finished", "low": "finished"}
    events = await log_of(live.settings.database_url)
    low_kinds = kinds(events, "job-low")
    assert low_kinds.count("EvictionStarted") == 1 and low_kinds.count("JobPreempted") == 1
    assert kinds(events, "job-high").count("JobStarted") == 1
    preempted = next(e for e in events if e.stream == "job-low" and e.type == "JobPreempted")
    assert preempted.data["checkpointed"]


async def both_finish(live: LiveStack, other: str) -> tuple[list[RecordedEvent], list[RecordedEvent]]:
    """Wait for ``other`` and the elastic job ``el`` to finish; the log, and ``el``'s events."""
    states = await live.wait_terminal([other, "el"], timeout=120)
    assert states == {other: "finished", "el": "finished"}
    events = await log_of(live.settings.database_url)
    return events, [e for e in events if e.stream == "job-el"]


async def test_an_elastic_job_shrinks_instead_of_being_preempted_and_restarts_smaller(
    live: LiveStack, tmp_path: Path
) -> None:
    import os

    await start_process_stack(live)
    quarter = f"{len(os.sched_getaffinity(0)) * 1000 // 4}m"
    elastic = JobSpec.model_validate(
        {
            "id": "el",
            "tenant": "t",
            "priority-class": "best-effort",
            "checkpointable": True,
            "replicas": 4,
            "elastic": "2:4",
            "resources": {"cpu": quarter, "memory": "16Mi"},
            "command": [sys.executable, JOB, "--steps", "40", "--step-s", "0.25"],
        }
    )
    await stack.submit([elastic], live.settings)
    await wait_log(live, lambda ev: kinds(ev, "job-el").count("JobStarted") == 4)
    await asyncio.sleep(1.0)  # a few steps done
    half = f"{len(os.sched_getaffinity(0)) * 1000 // 2}m"
    high = process_job("high", "high", "--steps", "4", "--step-s", "0.25").model_copy(
        update={
            "resources": JobSpec.model_validate(
                {"id": "x", "tenant": "t", "resources": {"cpu": half, "memory": "16Mi"}}
            ).resources
        }
    )
    await stack.submit([high], live.settings)
    events, el = await both_finish(live, "high")
    kinds_el = [e.type for e in el]
    assert "JobPreempted" not in kinds_el  # shrunk, not preempted
    request = next(e for e in el if e.type == "PreemptionRequested")
    eviction = next(e for e in el if e.type == "EvictionStarted")
    resized = next(e for e in el if e.type == "JobResized")
    assert request.data["resize_to"] == eviction.data["resize_to"] == resized.data["replicas"] == 2
    # (Once the preemptor is done the job may grow back, a later attempt: only attempt 0 here.)
    stops = [e for e in el if e.type == "TaskStopped" and e.data["attempt"] == 0]
    assert sorted(e.data["task"] for e in stops) == [0, 1, 2, 3] and all(
        e.data["checkpointed"] for e in stops
    )
    assert resized.data["checkpointed"] and [b["task"] for b in resized.data["bindings"]] == [0, 1]
    # The two kept replicas restart as attempt 1; the preemptor starts once the other two left.
    restarts = [e for e in el if e.type == "JobStarted" and e.data["attempt"] == 1]
    assert sorted(e.data["task"] for e in restarts) == [0, 1]
    high_start = next(e.position for e in events if e.stream == "job-high" and e.type == "JobStarted")
    # Only the removed replicas free room; the kept ones keep theirs while they restart.
    assert max(s.position for s in stops if s.data["task"] >= 2) < high_start
    seen = json.loads((tmp_path / "checkpoints" / "el" / "attempt-1.json").read_text())
    assert seen["world_size"] == 2 and seen["resume"] and seen["from_step"] > 0


async def test_an_elastic_job_grows_into_freed_room_and_restarts_all_replicas_at_the_new_size(
    live: LiveStack, tmp_path: Path
) -> None:
    import os

    await start_process_stack(live)
    cpus = len(os.sched_getaffinity(0)) * 1000
    block = process_job("block", "normal", "--steps", "20", "--step-s", "0.25").model_copy(
        update={
            "resources": JobSpec.model_validate(
                {"id": "x", "tenant": "t", "resources": {"cpu": f"{cpus // 2}m", "memory": "16Mi"}}
            ).resources
        }
    )
    await stack.submit([block], live.settings)
    await wait_log(live, has("JobStarted", "job-block"))
    elastic = JobSpec.model_validate(
        {
            "id": "el",
            "tenant": "t",
            "checkpointable": True,
            "replicas": 4,
            "elastic": "2:4",
            "resources": {"cpu": f"{cpus // 4}m", "memory": "16Mi"},
            "command": [sys.executable, JOB, "--steps", "40", "--step-s", "0.25"],
        }
    )
    await stack.submit([elastic], live.settings)
    events, el = await both_finish(live, "block")
    kinds_el = [e.type for e in el]
    assert "JobPreempted" not in kinds_el and kinds_el.count("JobGrowRequested") == 1, kinds_el
    placed = next(e for e in el if e.type == "JobPlaced")
    assert [b["task"] for b in placed.data["bindings"]] == [0, 1]  # half the machine was taken
    grow = next(e for e in el if e.type == "JobGrowRequested")
    block_end = next(e.position for e in events if e.stream == "job-block" and e.type == "JobFinished")
    assert grow.position > block_end and [b["task"] for b in grow.data["added"]] == [2, 3]
    # The added room is taken on the node's stream too, with the version read (no double booking).
    assert any(e.stream == "node-box" and e.type == "JobGrowRequested" for e in events)
    eviction = next(e for e in el if e.type == "EvictionStarted")
    resized = next(e for e in el if e.type == "JobResized")
    assert eviction.data["resize_to"] == resized.data["replicas"] == 4 and eviction.data["by_job"] == ""
    stops = [e for e in el if e.type == "TaskStopped"]
    assert sorted(e.data["task"] for e in stops) == [0, 1] and all(e.data["checkpointed"] for e in stops)
    assert [b["task"] for b in resized.data["bindings"]] == [0, 1, 2, 3] and resized.data["checkpointed"]
    restarts = [e for e in el if e.type == "JobStarted" and e.data["attempt"] == 1]
    assert sorted(e.data["task"] for e in restarts) == [0, 1, 2, 3]
    first = json.loads((tmp_path / "checkpoints" / "el" / "attempt-0.json").read_text())
    seen = json.loads((tmp_path / "checkpoints" / "el" / "attempt-1.json").read_text())
    assert first["world_size"] == 2 and not first["resume"]
    assert seen["world_size"] == 4 and seen["resume"] and seen["from_step"] > 0


def nodes_csv(folder: Path, name: str, nodes: list[str]) -> Path:
    path = folder / f"{name}.csv"
    rows = "".join(f"{n},64000,262144,8,V100\n" for n in nodes)
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + rows)
    return path


async def start_simulated(live: LiveStack, tmp_path: Path, agents: dict[str, list[str]]) -> None:
    live.env.update(FAST)
    await live.start("relay", "-m", "shared.eventstore.relay")
    await live.start("admission", "-m", "services.admission.app")
    await live.start("preemption", "-m", "services.preemption.app")
    for name, nodes in agents.items():
        csv = nodes_csv(tmp_path, name, nodes)
        await live.start(name, "-m", "services.agent.app", "--mode", "simulated", "--nodes", str(csv))
    await live.start("placement-1", "-m", "services.placement.app", "--name", "w1", ready="placement-w1")


def sim_job(job_id: str, seconds: float, checkpointable: bool = True) -> JobSpec:
    return JobSpec.model_validate(
        {
            "id": job_id,
            "tenant": "t",
            "checkpointable": checkpointable,
            "resources": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 8},
            "duration-s": seconds,
        }
    )


async def test_a_killed_agents_jobs_run_elsewhere_once_after_its_lease_and_the_requeue(
    live: LiveStack, tmp_path: Path
) -> None:
    await start_simulated(live, tmp_path, {"agent-a": ["node-a"], "agent-b": ["node-b"]})
    await stack.submit([sim_job("j", 12.0)], live.settings)
    events = await wait_log(live, has("JobStarted", "job-j"))
    first = next(e for e in events if e.stream == "job-j" and e.type == "JobStarted")
    lost, other = ("node-a", "node-b") if first.data["node"] == "node-a" else ("node-b", "node-a")
    killed_at = time.time()
    await live.kill("agent-a" if lost == "node-a" else "agent-b")
    states = await live.wait_terminal(["j"], timeout=90)
    assert states["j"] == "finished"
    events = await log_of(live.settings.database_url)
    starts = [e for e in events if e.stream == "job-j" and e.type == "JobStarted"]
    assert [(e.data["attempt"], e.data["node"]) for e in starts] == [(0, lost), (1, other)]  # none twice
    steps = [e.type for e in events if e.stream in (f"node-{lost}", "job-j") and e.type != "JobPlaced"]
    assert steps.index("NodeNotReady") < steps.index("EvictionStarted") < steps.index("JobPreempted")
    restarted = starts[1].recorded_at.timestamp() - killed_at
    # lease 3 s + requeue 2 s + grace 6 s + report 1 s, plus the follow-ups' latency
    assert restarted < 3 + 2 + 6 + 1 + 8, restarted
    preempted = next(e for e in events if e.stream == "job-j" and e.type == "JobPreempted")
    assert not preempted.data["checkpointed"] and "NotReady" in preempted.data["reason"]


async def test_a_drain_evicts_requeues_and_ends_with_node_drained_then_uncordon(
    live: LiveStack, tmp_path: Path
) -> None:
    await start_simulated(live, tmp_path, {"agent": ["node-a", "node-b"]})
    await stack.submit([sim_job("j", 30.0)], live.settings)
    events = await wait_log(live, has("JobStarted", "job-j"))
    busy = next(e for e in events if e.stream == "job-j" and e.type == "JobStarted").data["node"]
    idle = "node-b" if busy == "node-a" else "node-a"
    await stack.send_command(DrainNode(node=busy, reason="maintenance"), live.settings)
    events = await wait_log(live, has("NodeDrained", f"node-{busy}"), timeout=60)
    assert kinds(events, f"node-{busy}")[-2:] == ["NodeCordoned", "NodeDrained"]
    events = await wait_log(
        live, lambda ev: sum(1 for e in ev if e.stream == "job-j" and e.type == "JobStarted") == 2
    )
    starts = [e for e in events if e.stream == "job-j" and e.type == "JobStarted"]
    assert [(e.data["attempt"], e.data["node"]) for e in starts] == [(0, busy), (1, idle)]
    preempted = next(e for e in events if e.stream == "job-j" and e.type == "JobPreempted")
    assert preempted.data["checkpointed"] and preempted.data["reason"].startswith(f"drain of {busy}")
    # Nothing new goes to the drained node; after uncordon it takes work again.
    await stack.submit([sim_job("k", 2.0)], live.settings)
    await asyncio.sleep(3.0)
    events = await log_of(live.settings.database_url)
    assert "JobPlaced" not in kinds(events, "job-k")  # node-b is busy, node-a is drained
    await stack.send_command(UncordonNode(node=busy), live.settings)
    states = await live.wait_terminal(["k"], timeout=60)
    assert states["k"] == "finished"
    events = await log_of(live.settings.database_url)
    placed_k = next(e for e in events if e.stream == "job-k" and e.type == "JobPlaced")
    assert placed_k.data["bindings"][0]["node"] == busy
    assert Counter(kinds(events, f"node-{busy}"))["NodeUncordoned"] == 1


def _running(marker: str) -> bool:
    """Whether a process whose command line contains ``marker`` runs on this machine."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                return True
        except OSError:
            continue
    return False


async def test_a_cancelled_job_gives_its_room_back_only_once_its_process_has_stopped(live: LiveStack) -> None:
    """``tessera cancel`` of a running job whose process ignores SIGTERM: the job waiting for
    the same room is placed only after the process was killed at the end of its grace, never
    beside it (before, ``JobCancelled`` freed the room at once and the next job started while
    the old process still ran for up to ten seconds)."""
    await start_process_stack(live)
    marker = "--steps 4000 --step-s 0.25"
    stubborn = process_job("stubborn", "normal", *marker.split(), "--ignore-sigterm")
    await stack.submit([stubborn], live.settings)
    await wait_log(live, has("JobStarted", "job-stubborn"))
    await stack.submit([process_job("next", "normal", "--steps", "2")], live.settings)  # no room: waits
    await asyncio.sleep(1.0)
    await stack.send_command(CancelJob(job_id="stubborn", reason="no longer needed"), live.settings)
    states = await live.wait_terminal(["stubborn", "next"], timeout=90)
    assert states == {"stubborn": "cancelled", "next": "finished"}
    events = await log_of(live.settings.database_url)
    ended = ["CancelRequested", "EvictionStarted", "TaskStopped", "JobCancelled"]
    assert kinds(events, "job-stubborn")[-4:] == ended
    at = {e.type: e for e in events if e.stream == "job-stubborn"}
    assert at["TaskStopped"].data["killed"] and at["EvictionStarted"].data["grace_s"] == 6.0
    next_placed = next(e for e in events if e.stream == "job-next" and e.type == "JobPlaced")
    # The room came back when the task had stopped (as in an eviction, each stopped task frees
    # its own), after the grace the stubborn process was given (it ignored SIGTERM; killed).
    assert at["TaskStopped"].position < next_placed.position
    waited = (next_placed.recorded_at - at["EvictionStarted"].recorded_at).total_seconds()
    assert waited >= 5.5, waited
    assert not _running(marker), "the cancelled job's process outlived its cancel"
