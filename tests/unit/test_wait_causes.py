"""Why large jobs wait: the cause each waiting job of more than 4 GPUs is counted under, and the
split the timeline reports (``large_wait_cause_pct``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.core.actions.context import BEHIND_HEAD, DEPTH, QUEUE_MAX
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import Code, Status
from shared.core.queues import QueueSpec, QueueTree
from shared.core.registry import build_profile
from shared.core.task import NodeSpec, TaskShape
from shared.sim.metrics import summarise
from shared.sim.policies import timeline_config
from shared.sim.report import plot_wait_causes
from shared.sim.timeline import run_timeline
from shared.sim.wait_causes import CAUSES, wait_cause
from shared.sim.workload import SimJob, Workload

ONE = TaskShape(1000, 1024, 1, 1000)
EIGHT = TaskShape(8000, 8192, 8, 1000)
NO_ROOM = Status(Code.UNSCHEDULABLE, "GpuFit", "no node has room")
RESERVED = Status(Code.UNSCHEDULABLE, "Allowed", "no allowed node fits")


def test_the_first_cause_that_applies_is_counted() -> None:
    assert wait_cause(True, 2.0, NO_ROOM) == "holds-room"  # holding room beats everything
    assert wait_cause(False, 1.0, NO_ROOM) == "share"  # its queue has its share: rationed
    assert wait_cause(False, 0.5, RESERVED) == "reserved"
    assert wait_cause(False, 0.5, NO_ROOM) == "no-room"
    assert wait_cause(False, 0.5, DEPTH) == "depth"
    assert wait_cause(False, 0.5, BEHIND_HEAD) == "order"
    assert wait_cause(False, 0.5, QUEUE_MAX) == "other"
    assert wait_cause(False, 0.5, None) == "other"  # no reason given: backing off


def _causes(jobs: list[SimJob], queues: list[str], policy: str) -> dict[str, float | None]:
    # The index (and the split with it) is sampled at moments something happens, at most every
    # half hour: short 1-GPU jobs of queue a arriving every 900 s make those moments.
    ticks = [SimJob(f"t{k}", "a", "a", ONE, 1, 900.0 * k, 10.0) for k in range(1, 21)]
    nodes = (NodeSpec("n0", 64_000, 65_536, 8, "V100"),)
    w = Workload("t", nodes, (*jobs, *ticks), QueueTree([QueueSpec(q) for q in queues]))
    profile = build_profile("tessera", TypicalWorkload.from_tasks(j.shape for j in w.jobs))
    summary = summarise(run_timeline(w, policy, timeline_config(policy, profile), 1))
    causes = summary["large_wait_cause_pct"]
    assert isinstance(causes, dict) and list(causes) == list(CAUSES)
    return causes


def _only(cause: str) -> dict[str, float]:
    return {c: 100.0 if c == cause else 0.0 for c in CAUSES}


def test_a_large_job_behind_its_own_queue_is_rationed_and_one_behind_another_has_no_room() -> None:
    # One 8-GPU node.  Queue a runs eight 1-GPU jobs for 20,000 s from t=0; an 8-GPU job comes
    # at 1 s and waits until they end (10+ samples of half an hour).
    small = [SimJob(f"s{i}", "a", "a", ONE, 1, 0.0, 20_000.0) for i in range(8)]
    same_queue = SimJob("big", "a", "a", EIGHT, 1, 1.0, 100.0)
    # In its own queue the queue holds the whole cluster, all it can deserve: fair share rations it.
    assert _causes([*small, same_queue], ["a"], "drf") == _only("share")
    # In a queue of its own (equal weights) it deserves half the node and holds none; drf does not
    # evict, so it waits for room.
    other_queue = SimJob("big", "b", "b", EIGHT, 1, 1.0, 100.0)
    assert _causes([*small, other_queue], ["a", "b"], "drf") == _only("no-room")
    # fifo-backfill: as the blocked head it reserves the node and waits for it to drain.
    assert _causes([*small, other_queue], ["a", "b"], "fifo-backfill") == _only("holds-room")


def test_no_large_job_waiting_gives_no_split() -> None:
    jobs = [SimJob("s", "a", "a", ONE, 1, 0.0, 20_000.0), SimJob("t", "b", "b", ONE, 1, 1.0, 20_000.0)]
    assert _causes(jobs, ["a", "b"], "drf") == dict.fromkeys(CAUSES, None)


@pytest.mark.parametrize("policy", ["fifo", "tessera"])
def test_every_policy_reports_the_split(policy: str) -> None:
    small = [SimJob(f"s{i}", "a", "a", ONE, 1, 0.0, 20_000.0) for i in range(8)]
    causes = _causes([*small, SimJob("big", "b", "b", EIGHT, 1, 1.0, 100.0)], ["a", "b"], policy)
    assert sum(v or 0.0 for v in causes.values()) == pytest.approx(100.0)


def test_the_figure_is_drawn_only_where_a_large_job_waited(tmp_path: Path) -> None:
    waited = {"large_wait_cause_pct": _only("share"), "wait_p95_s": {"8": 7200.0}}
    never = {"large_wait_cause_pct": dict.fromkeys(CAUSES, None), "wait_p95_s": {"8": None}}
    summary = {"trace": "t", "policies": {"fifo": waited, "tessera": never}}
    assert plot_wait_causes(summary, tmp_path / "w.png") and (tmp_path / "w.png").stat().st_size > 0
    quiet = {"trace": "t", "policies": {"fifo": never}}
    assert not plot_wait_causes(quiet, tmp_path / "none.png") and not (tmp_path / "none.png").exists()
