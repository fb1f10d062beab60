"""Kafka and PostgreSQL crash and come back while jobs flow: no accepted job is lost, none runs
twice, no GPU is given twice, and every service rides the outage out.

Only on the project's own servers (``infra/``): a test may not crash servers that the
environment names (someone else's) or testcontainers' (not restarted in place).  Each crash is
the real thing: Kafka's broker is killed with SIGKILL, PostgreSQL stops immediately (every
process at once, nothing checkpointed, crash recovery on the next start).  A job is accepted
once Kafka has it: while PostgreSQL is down, jobs are still submitted, and admission must hold
them until it can write them; while Kafka is down nothing can be submitted (the producer
fails), so those jobs come after it is back.
"""

from __future__ import annotations

import asyncio
import collections

import pytest

from loadtests.live_stack import TRACES, LiveStack, log_of, trace_specs
from shared.cli import stack
from shared.core.lifecycle import TASK_ENDS
from shared.state.fold import ClusterView
from tests.e2e.test_pipeline import LONGEST_S, assert_exactly_once
from tests.servers import crash, own_servers, restart

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not own_servers(), reason="crashes only the project's own servers (infra/)"),
]


async def _placed(live: LiveStack, at_least: int, timeout: float) -> int:
    """Wait until at least ``at_least`` jobs of the log are placed; the count."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        events = await log_of(live.settings.database_url)
        placed = sum(1 for e in events if e.type == "JobPlaced")
        if placed >= at_least or loop.time() > deadline:
            return placed
        await asyncio.sleep(0.5)


@pytest.mark.parametrize(
    ("server", "outage_s", "max_poll_s"),
    [
        ("kafka", 8.0, None),
        ("postgres", 8.0, None),
        # Longer than Kafka's max.poll.interval (3 s here, 300 s by default): admission and the
        # placement workers, waiting for PostgreSQL, stop polling, are dropped from their
        # groups, rejoin, and are given their uncommitted work again.
        ("postgres", 12.0, 3.0),
    ],
    ids=["kafka", "postgres", "postgres-past-max-poll"],
)
async def test_a_crashed_server_loses_no_accepted_job_and_gives_no_gpu_twice(
    live: LiveStack, server: str, outage_s: float, max_poll_s: float | None
) -> None:
    nodes = str(TRACES / "openb_node_list_gpu_node.csv")
    # Leases shorter than the outage: a preemption service that counted the silence of a Kafka
    # outage against the nodes would declare them all lost and evict every running job.
    live.env.update(TESSERA_HEARTBEAT_S="1", TESSERA_LEASE_S="6", TESSERA_REQUEUE_AFTER_S="1")
    if max_poll_s is not None:
        live.env.update(TESSERA_KAFKA_MAX_POLL_INTERVAL_S=str(max_poll_s))
    await live.standard(
        workers=2, agent=["--mode", "simulated", "--nodes", nodes, "--limit", "60", "--speedup", "500"]
    )
    specs = trace_specs(300, speedup=500, tag=f"crash-{server}-{outage_s:.0f}", longest_s=LONGEST_S)
    await stack.submit(specs[:150], live.settings)
    assert await _placed(live, 20, timeout=60) >= 20, "nothing was placed before the crash"
    at_crash = await log_of(live.settings.database_url)
    running = {e.stream for e in at_crash if e.type == "JobStarted"} - {
        e.stream for e in at_crash if e.type in TASK_ENDS
    }
    # The crash lands while jobs are being placed, started and ended.
    try:
        await asyncio.to_thread(crash, server)
        if server == "postgres":
            await stack.submit(specs[150:200], live.settings)  # accepted by Kafka, not yet written
        await asyncio.sleep(outage_s)  # the outage outlasts a lease: every service meets it
    finally:
        await asyncio.to_thread(restart, server)
    await stack.submit(specs[200:] if server == "postgres" else specs[150:], live.settings)
    states = await live.wait_terminal([s.id for s in specs], timeout=300)
    outcome = collections.Counter(states.values())
    assert outcome == {"finished": len(specs)}, outcome
    events = await log_of(live.settings.database_url)
    # Replaying the log re-takes every placement on the cluster model, which refuses any
    # over-commit: a replay that completes proves nothing was given twice.
    replay = ClusterView()
    replay.apply_all(events)
    assert replay.cluster is not None and replay.cluster.used_gpu_milli() == 0
    assert_exactly_once(events, [s.id for s in specs])
    # The crash met running work: a task running just before it ended after it.
    ended_after = {e.stream for e in events if e.type in TASK_ENDS and e.position > at_crash[-1].position}
    assert running & ended_after, "no task was running when the server crashed"
    assert not [e.stream for e in events if e.type == "NodeNotReady"], "an outage was taken for lost nodes"
    exited = {name: p.returncode for name, p in live.procs.items() if p.returncode is not None}
    assert not exited, f"services exited during the outage: {exited}"
