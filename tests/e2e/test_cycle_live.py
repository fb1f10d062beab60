"""The scheduling cycle live, on real Kafka and PostgreSQL: gangs, queue shares, quotas.

Each test runs its own stack (relay, admission, placement worker, a simulated agent standing in
for a few 8-GPU nodes) on its own database and topic prefix.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import pytest

from loadtests.chaos_mix import mix_faults
from loadtests.live_stack import LiveStack, log_of
from schemas import JobSpec
from schemas.queues import QueueTreeSpec
from shared.cli import stack
from shared.state.fold import ClusterView

pytestmark = pytest.mark.integration


def nodes_csv(folder: Path, count: int) -> Path:
    path = folder / "nodes.csv"
    rows = "".join(f"gpu-{i},64000,262144,8,V100\n" for i in range(count))
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + rows)
    return path


def job(job_id: str, gpus: int = 1, seconds: float = 3.0, **extra: object) -> JobSpec:
    body: dict[str, object] = {
        "id": job_id,
        "tenant": "t",
        "resources": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": gpus},
        "duration-s": seconds,
    }
    body.update(extra)
    return JobSpec.model_validate(body)


async def start(live: LiveStack, tmp_path: Path, nodes: int) -> None:
    csv = nodes_csv(tmp_path, nodes)
    await live.standard(workers=1, agent=["--mode", "simulated", "--nodes", str(csv), "--speedup", "1"])


async def placed(live: LiveStack, job_id: str, within_s: float = 30.0) -> None:
    """Wait until ``job_id``'s ``JobPlaced`` is in the log."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        events = await log_of(live.settings.database_url)
        if any(e.stream == f"job-{job_id}" and e.type == "JobPlaced" for e in events):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{job_id} was not placed within {within_s} s")


async def reasons_until(live: LiveStack, job_id: str, prefix: str, within_s: float) -> set[str]:
    """Every reason the workers gave for ``job_id`` waiting, until one starts with ``prefix``."""
    said: set[str] = set()
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and not any(w.startswith(prefix) for w in said):
        said |= {r["waiting"][job_id] for r in live.stats() if job_id in r.get("waiting", {})}
        await asyncio.sleep(0.2)
    return said


async def test_a_gang_of_four_starts_whole_after_reserving_its_nodes(live: LiveStack, tmp_path: Path) -> None:
    await start(live, tmp_path, nodes=2)
    filler = [job(f"fill-{i}", seconds=6.0) for i in range(14)]  # 14 of the 16 GPUs for 6 s
    await stack.submit(filler, live.settings)
    await asyncio.sleep(1.5)
    gang = job("gang", gpus=2, seconds=2.0, replicas=4, gang={"min-member": 4})
    late = [job(f"late-{i}", seconds=30.0) for i in range(2)]  # would take the 2 free GPUs for long
    await stack.submit([gang, *late], live.settings)
    # While it waits, the worker says why (its stats file, as `tessera status` reads it).
    said = await reasons_until(live, "gang", "Reserved:", within_s=4.0)
    assert any(w.startswith("Reserved: holds 2 node(s)") for w in said), said
    states = await live.wait_terminal(["gang", *(j.id for j in filler)], timeout=90)
    assert set(states.values()) == {"finished"}
    events = await log_of(live.settings.database_url)
    mine = [e for e in events if e.stream == "job-gang"]
    kinds = [e.type for e in mine]
    assert "JobReserved" in kinds and kinds.index("JobReserved") < kinds.index("JobPlaced")
    placed = next(e for e in mine if e.type == "JobPlaced")
    assert len(placed.data["bindings"]) == 4
    reserved = set(next(e for e in mine if e.type == "JobReserved").data["nodes"])
    assert {b["node"] for b in placed.data["bindings"]} <= reserved
    # All four tasks start in one append, nothing else between them: never 1-3 of them running.
    starts = [e.position for e in mine if e.type == "JobStarted"]
    between = [e for e in events if min(starts) <= e.position <= max(starts)]
    assert len(starts) == 4
    assert all(e.stream == "job-gang" or e.stream.startswith("task-gang-") for e in between)
    # The 30-s jobs would have delayed the gang: they did not take its room before it started.
    late_placed = [e.position for e in events if e.type == "JobPlaced" and e.stream.startswith("job-late")]
    assert all(p > placed.position for p in late_placed)


async def test_two_queues_asking_for_more_than_their_guarantee_converge_to_their_shares(
    live: LiveStack, tmp_path: Path
) -> None:
    await start(live, tmp_path, nodes=4)  # 32 GPUs
    tree = QueueTreeSpec.model_validate(
        {
            "queues": [
                {"name": "red", "guarantee": {"nvidia.com/gpu": 16}},
                {"name": "blue", "guarantee": {"nvidia.com/gpu": 16}},
            ]
        }
    )
    await stack.apply_queues(tree, live.settings)
    # Run times spread over 2-4 s so that jobs do not all end at one moment.
    red = [job(f"red-{i}", seconds=2.0 + (i % 9) / 4, queue="red") for i in range(120)]
    blue = [job(f"blue-{i}", seconds=2.0 + (i % 9) / 4, queue="blue") for i in range(120)]
    await stack.submit(red, live.settings)
    held = 0
    for _ in range(40):  # red borrows the whole cluster
        await asyncio.sleep(0.25)
        view, _ = await stack.read_view(live.settings)
        held = sum(1 for r in view.jobs.values() if r.spec.queue == "red" and r.status.active)
        if held == 32:
            break
    assert held == 32
    await stack.submit(blue, live.settings)
    shares: list[tuple[int, int]] = []
    deadline = time.time() + 40
    while time.time() < deadline:
        await asyncio.sleep(1.0)
        view, _ = await stack.read_view(live.settings)
        use = collections.Counter(r.spec.queue for r in view.jobs.values() if r.status.active)
        waiting = collections.Counter(r.spec.queue for r in view.jobs.values() if r.state == "pending")
        if waiting["red"] >= 16 and waiting["blue"] >= 16:  # both still ask for more than they get
            shares.append((use["red"], use["blue"]))
        elif shares:  # no more is submitted: once one queue asks for less, it never asks more
            break
    # Once red's first jobs end (3 s), the cycle serves the queue furthest below its share: both
    # queues hold about their 16 GPUs while both still wait.
    assert len(shares) >= 5, shares
    settled = shares[len(shares) // 2 :]
    assert all(12 <= b <= 20 and 12 <= r <= 20 for r, b in settled), shares


async def test_reclaim_evicts_what_was_borrowed_and_no_more(live: LiveStack, tmp_path: Path) -> None:
    """A queue that borrowed 16 GPUs gives back 16 when their owner asks, not more: while victims
    stopped and their preemptors waited, each cycle had seen the borrower still over its
    guarantee and the owner still under it, and evicted again (26 evictions for 16 borrowed on
    32 GPUs), and the borrower then took its extra losses back from the owner."""
    live.env.update(
        {
            "TESSERA_PREEMPT_MIN_RUNTIME_S": "0",  # nothing protects the victims: only the count
            "TESSERA_PREEMPT_GRACE_S": "1",
            "TESSERA_PREEMPT_RESTART_OVERHEAD_S": "1",
        }
    )
    await start(live, tmp_path, nodes=4)  # 32 GPUs
    halves = {"queues": [{"name": q, "guarantee": {"nvidia.com/gpu": 16}} for q in ("red", "blue")]}
    await stack.apply_queues(QueueTreeSpec.model_validate(halves), live.settings)

    async def holding() -> collections.Counter[str]:
        view, _ = await stack.read_view(live.settings)
        return collections.Counter(r.spec.queue for r in view.jobs.values() if r.status.active)

    await stack.submit(
        [job(f"red-{i}", seconds=60.0, queue="red", checkpointable=True) for i in range(40)], live.settings
    )
    deadline = time.monotonic() + 20
    while (await holding())["red"] < 32 and time.monotonic() < deadline:  # red borrows 16
        await asyncio.sleep(0.2)
    await stack.submit(
        [job(f"blue-{i}", seconds=60.0, queue="blue", checkpointable=True) for i in range(24)], live.settings
    )
    deadline = time.monotonic() + 30
    while (await holding())["blue"] < 16 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(3.0)  # time for a second round of evictions, were there one
    use = await holding()
    events = await log_of(live.settings.database_url)
    asked = [e for e in events if e.type == "PreemptionRequested"]
    assert sorted(e.stream.split("-")[1] for e in asked) == ["red"] * 16, [e.stream for e in asked]
    assert {e.data["reason"] for e in asked} == {"reclaim"}
    assert use == {"red": 16, "blue": 16}, use
    # More blue preemptors than nodes waited at once: they shared nodes (before, each held a node
    # of its own, and reclaim took one eviction per node per round).
    assert mix_faults(events).shared_by_preemptors > 0


async def test_a_large_job_raised_by_its_queue_evicts_another_queues_work_after_preempt_after(
    live: LiveStack, tmp_path: Path
) -> None:
    """The source article's case, with the two queue settings that make it: a whole-node job that
    waited past its queue's ``preempt-after`` takes the node from smaller work of another queue,
    which its queue's ``large-jobs`` rule made lower-priority than it."""
    # Seconds, not the hours of a real cluster: victims may be young, and a restart costs them 1 s
    # (else evicting eight jobs to spare a job a few seconds' wait is rightly not worth it).
    live.env.update(
        {
            "TESSERA_PREEMPT_MIN_RUNTIME_S": "0",
            "TESSERA_PREEMPT_GRACE_S": "2",
            "TESSERA_PREEMPT_RESTART_OVERHEAD_S": "1",
        }
    )
    await start(live, tmp_path, nodes=1)  # 8 GPUs
    wait_s = 3.0
    rule = {"min-gpus": 8, "priority-class": "high"}
    tree = {
        "queues": [
            {
                "name": "org",
                "preempt-after": wait_s,
                "large-jobs": rule,
                "children": [{"name": "a"}, {"name": "b"}],
            }
        ]
    }
    await stack.apply_queues(QueueTreeSpec.model_validate(tree), live.settings)
    small = [job(f"small-{i}", seconds=15.0, queue="a", checkpointable=True) for i in range(8)]
    await stack.submit(small, live.settings)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # a holds the whole node
        view, _ = await stack.read_view(live.settings)
        if sum(1 for r in view.jobs.values() if r.status.active) == 8:
            break
        await asyncio.sleep(0.2)
    big = job("big", gpus=8, seconds=2.0, queue="b")  # asks for no class: normal, as the small ones
    await stack.submit([big], live.settings)
    states = await live.wait_terminal(["big", *(j.id for j in small)], timeout=90)
    assert set(states.values()) == {"finished"}, states  # the victims resumed and ended: none lost
    events = await log_of(live.settings.database_url)
    admitted = next(e for e in events if e.stream == "job-big" and e.type == "JobAdmitted")
    assert admitted.data["promoted_class"] == "high"
    asked = [e for e in events if e.type == "PreemptionRequested" and e.data.get("by_job") == "big"]
    assert {e.stream for e in asked} == {f"job-small-{i}" for i in range(8)}
    # Not before it had waited its queue's preempt-after: before, small work of another queue
    # was not its to take (same queue tree, equal shares, nothing borrowed beyond a guarantee).
    first_ask = min(e.recorded_at for e in asked)
    assert (first_ask - admitted.recorded_at).total_seconds() >= wait_s
    started = next(e for e in events if e.stream == "job-big" and e.type == "JobStarted")
    # It started on the room its victims left (each one preempted before it started), not on
    # room their ends would have freed: every small job ended after it started.
    preempted = {e.stream: e.position for e in events if e.type == "JobPreempted"}
    assert all(preempted[f"job-small-{i}"] < started.position for i in range(8)), preempted
    ends = {e.stream: e.position for e in events if e.type == "JobFinished"}
    assert all(ends[f"job-small-{i}"] > started.position for i in range(8))


async def test_an_over_quota_submission_is_rejected_and_changes_nothing_else(
    live: LiveStack, tmp_path: Path
) -> None:
    await start(live, tmp_path, nodes=2)
    tree = QueueTreeSpec.model_validate({"queues": [{"name": "small", "max": {"nvidia.com/gpu": 4}}]})
    await stack.apply_queues(tree, live.settings)
    before = len(await log_of(live.settings.database_url))
    await stack.submit([job("big", gpus=8, queue="small"), job("ok", gpus=2, queue="small")], live.settings)
    states = await stack.wait_for(["big", "ok"], 60, live.settings)
    assert states["big"].startswith("rejected (over-quota)") and states["ok"] == "finished"
    events = (await log_of(live.settings.database_url))[before:]
    assert not [e for e in events if e.stream == "job-big"]
    assert [e.type for e in events if e.stream == "rejected-big"] == ["JobRejected"]


async def test_two_placement_workers_never_pass_a_parent_queues_max_together(
    live: LiveStack, tmp_path: Path
) -> None:
    """Each worker plans on its own view and prefers its own half of the nodes: without the
    quota stream, two that each saw room under the max placed on different nodes at once (a
    max of 4 GPUs reached 7 held)."""
    csv = nodes_csv(tmp_path, 4)
    await live.standard(workers=2, agent=["--mode", "simulated", "--nodes", str(csv), "--speedup", "1"])
    tree = {"queues": [{"name": "org", "max": {"nvidia.com/gpu": 4}, "children": [{"name": "a"}]}]}
    await stack.apply_queues(QueueTreeSpec.model_validate(tree), live.settings)
    jobs = [job(f"c-{i}", seconds=0.5 + (i % 5) / 5, queue="a") for i in range(100)]
    await stack.submit(jobs, live.settings)
    states = await stack.wait_for([j.id for j in jobs], 120, live.settings)
    assert set(states.values()) == {"finished"}
    view, peak = ClusterView(), 0
    for e in await log_of(live.settings.database_url):
        view.apply(e)
        if e.type == "JobPlaced" and e.stream.startswith("job-"):
            peak = max(peak, sum(len(r.bindings) for r in view.jobs.values() if r.status.active))
    assert peak == 4  # the max is reached, never passed


BARRING_TREES = {
    # A later tree drops the job's queue, or no longer allows its tenant ("t") there.
    "queue-dropped": ({"queues": [{"name": "a"}]}, "QueueGone: queue 'b' is not in the queue tree"),
    "tenant-revoked": (
        {"queues": [{"name": "a"}, {"name": "b", "tenants": ["ml"]}]},
        "TenantBarred: tenant 't' is no longer allowed on queue 'b'",
    ),
}


@pytest.mark.parametrize("case", sorted(BARRING_TREES))
async def test_a_job_a_new_tree_bars_waits_on_a_free_node_until_a_tree_lets_it_in(
    live: LiveStack, tmp_path: Path, case: str
) -> None:
    barring, reason = BARRING_TREES[case]
    await start(live, tmp_path, nodes=1)
    both = QueueTreeSpec.model_validate({"queues": [{"name": "a"}, {"name": "b"}]})
    await stack.apply_queues(both, live.settings)
    await stack.submit([job("filler", gpus=8, seconds=3.0, queue="a")], live.settings)
    await placed(live, "filler")  # it holds the node before the barred job comes
    await stack.submit([job("barred", queue="b")], live.settings)  # admitted under the open tree
    await stack.apply_queues(QueueTreeSpec.model_validate(barring), live.settings)
    # The node frees; placed anyway the job would escape every quota or use a right it lost.
    said = await reasons_until(live, "barred", reason.split(":")[0] + ":", within_s=15.0)
    assert any(w.startswith(reason) for w in said), said
    assert (await stack.wait_for(["filler"], 30, live.settings))["filler"] == "finished"
    await asyncio.sleep(1.5)  # cycles run on the free node; the job still waits
    events = await log_of(live.settings.database_url)
    assert not [e for e in events if e.stream == "job-barred" and e.type == "JobPlaced"]
    back = len(events)
    await stack.apply_queues(both, live.settings)
    assert (await stack.wait_for(["barred"], 30, live.settings))["barred"] == "finished"
    after = (await log_of(live.settings.database_url))[back:]
    assert [e.type for e in after if e.stream == "job-barred" and e.type == "JobPlaced"] == ["JobPlaced"]
