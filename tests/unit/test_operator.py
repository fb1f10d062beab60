"""What an operator sets on top of a trace (``shared/sim/operator.py``): a class for large jobs and
every queue's preempt-after, and what the two do together in a timeline."""

from __future__ import annotations

from shared.core.fragmentation import TypicalWorkload
from shared.core.priority import class_value
from shared.core.queues import LargeJobRule, QueueSpec, QueueTree
from shared.core.registry import build_profile
from shared.core.task import NodeSpec, TaskShape
from shared.sim.operator import with_large_jobs, with_preempt_after
from shared.sim.policies import timeline_config
from shared.sim.timeline import run_timeline
from shared.sim.workload import SimJob, Workload

ONE = TaskShape(4000, 8192, 1, 1000)
EIGHT = TaskShape(32_000, 65_536, 8, 1000)
HIGH, NORMAL = class_value("high"), class_value("normal")
HOUR = 3600.0


def job(
    job_id: str, queue: str, shape: TaskShape, submit: float, work: float, priority: int = NORMAL
) -> SimJob:
    return SimJob(job_id, queue, queue, shape, 1, submit, work, priority=priority, checkpointable=True)


def busy_node() -> Workload:
    """One 8-GPU node shared by queues a and b (equal weights), each running four 1-GPU jobs of
    100 h (so each holds its deserved share and nothing is reclaimed), and a's 8-GPU job of 1 h
    submitted an hour later."""
    small = [job(f"{q}{i}", q, ONE, 0.0, 100 * HOUR) for q in "ab" for i in range(4)]
    jobs = (*small, job("big", "a", EIGHT, HOUR, HOUR))
    node = NodeSpec("n0", 64_000, 131_072, 8, "V100")
    return Workload("t", (node,), jobs, QueueTree([QueueSpec("a"), QueueSpec("b")]))


def big_job_wait_h(w: Workload) -> float:
    profile = build_profile("tessera", TypicalWorkload.from_tasks(j.shape for j in w.jobs))
    r = run_timeline(w, "tessera", timeline_config("tessera", profile), 1)
    return next(j.waited for j in r.jobs if j.spec.id == "big") / HOUR


def test_only_jobs_of_the_size_given_are_raised_and_never_lowered() -> None:
    w = busy_node()
    w = Workload(
        w.name, w.nodes, (*w.jobs, job("critical", "b", EIGHT, 0.0, 1.0, class_value("critical"))), w.queues
    )
    # An elastic job of eight 1-GPU replicas may start with one: it never waits for a whole node.
    elastic = SimJob("elastic", "b", "b", ONE, 8, 0.0, 1.0, min_replicas=1)
    w = Workload(w.name, w.nodes, (*w.jobs, elastic), w.queues)
    out = with_large_jobs(w, LargeJobRule(8, "high"))
    assert {j.id: j.priority for j in out.jobs if j.priority != NORMAL} == {"big": HIGH, "critical": 1000}
    assert out.notes["promoted_jobs"] == 1
    assert [j.id for j in out.jobs] == [j.id for j in w.jobs]  # same jobs, same order
    assert all(
        j.priority == NORMAL for j in with_large_jobs(w, LargeJobRule(9, "high")).jobs if j.id != "critical"
    )
    # The rule sits on every queue, as a live queue's ``large-jobs`` would.
    assert {q: r for q, r in out.queues.large_jobs.items()} == {
        "a": LargeJobRule(8, "high"),
        "b": LargeJobRule(8, "high"),
    }


def test_every_queue_gets_the_preempt_after_and_keeps_the_rest() -> None:
    w = with_preempt_after(busy_node(), 24 * HOUR)
    assert [(s.name, s.preempt_after_s, s.weight) for s in w.queues.specs.values()] == [
        ("a", 24 * HOUR, 1.0),
        ("b", 24 * HOUR, 1.0),
    ]
    assert busy_node().queues.specs["a"].preempt_after_s is None  # the original is untouched


def test_a_large_job_waits_for_room_unless_it_is_both_higher_and_past_preempt_after() -> None:
    w = busy_node()
    # As the trace is: equal priorities, nothing may be evicted, the job waits for the 100 h jobs.
    assert big_job_wait_h(w) > 98
    # preempt-after alone: the others are not of lower priority.
    assert big_job_wait_h(with_preempt_after(w, 2 * HOUR)) > 98
    # high alone: it may evict its own queue's four jobs, not b's, so it still cannot start.
    assert big_job_wait_h(with_large_jobs(w, LargeJobRule(8, "high"))) > 98
    # both: once it has waited 2 h it evicts all eight (checkpointable, they resume later).
    both = big_job_wait_h(with_preempt_after(with_large_jobs(w, LargeJobRule(8, "high")), 2 * HOUR))
    assert 2 <= both < 2.2
