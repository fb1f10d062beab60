"""Chaos: kill services and crash the servers at random while jobs flow, then check the log.

The whole stack runs as processes (relay, admission, preemption, two placement workers, a
simulated agent on 60 openb nodes, 20 with the mix) on a database and topic prefix of its own.
Trace jobs are submitted in chunks at ``--rate`` for ``--seconds``; meanwhile, every few seconds (seeded), one
fault strikes:

* a service is SIGKILLed and started again after a pause (the agent's pause stays well inside
  its lease, so its nodes are not taken for lost);
* Kafka's broker is SIGKILLed, or PostgreSQL stops at once (crash recovery on start), for a few
  seconds, then restarted (only on the project's own servers, ``infra/``).

A chunk is counted as submitted once Kafka acknowledged all of it (a chunk cut off by a Kafka
crash is sent again whole; admission ignores the twins).  A seeded ``--cancel-share`` of the
jobs is cancelled 0.2-3 s after it was submitted: some still wait, some run, most have ended
(a cancel is sent again while Kafka is down).  When the time is up every job must end, and
the log must show: each job admitted once and placed once (a cancelled one at most once), no
task started or ended twice, none started and never ended (a stop is an end), no service
exited but those killed, and a replay of the whole log (the cluster model refuses any
over-commit) that takes no GPU twice and ends with every GPU free.

With ``--mix`` (the default) the jobs are the scheduling mix of ``loadtests/chaos_mix.py``:
three queues, one parent under a ``max`` that a second tree lowers halfway through, priority
classes whose jobs evict best-effort work, gangs and elastic jobs; the checks then add
``max_passed``, ``placed_short`` and ``reserved_twice``, and ``placed_not_once`` counts
placements per attempt (an evicted job is placed again in its next attempt).

Ends with one JSON line: ``faults``, ``jobs``, ``finished``, ``cancels_sent``, ``cancelled``,
``cancelled_running``, ``rejected``, ``lost``, ``admitted_not_once``, ``placed_not_once``,
``tasks_started_twice``, ``tasks_ended_twice``, ``tasks_never_ended``, ``replay_error``,
``services_exited``, ``max_passed``, ``placed_short``, ``reserved_twice`` and ``mix`` (what the
mix exercised: gangs and elastic jobs placed, placements under a max, reservations, evictions,
shrinks, trees applied).  Exit status 1 if any from ``lost`` on is not 0 (or a replay failed).

    .venv/bin/python loadtests/chaos.py [--seconds 120] [--rate 10] [--seed 1] [--servers]
                                        [--cancel-share 0.05] [--mix | --no-mix]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import collections
import functools
import json
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from loadtests import chaos_mix
from loadtests.live_stack import TRACES, LiveStack, delivery_faults, log_of, trace_specs
from schemas import CancelJob, JobSpec
from shared.cli import stack
from shared.settings import Settings
from shared.sim.trace import load_nodes
from shared.state.fold import TERMINAL, ClusterView
from tests.conftest import create_database, drop_database
from tests.servers import crash, own_servers, restart

NODES = str(TRACES / "openb_node_list_gpu_node.csv")
NODE_COUNT = 60
MIX_NODE_COUNT = 20  # with the mix's longer run times, a third of the nodes keeps them busy


def agent(nodes: int, speedup: float) -> list[str]:
    """The simulated agent's arguments: ``speedup`` divides the run times the specs declare."""
    return ["--mode", "simulated", "--nodes", NODES, "--limit", str(nodes), "--speedup", str(speedup)]


@dataclass
class Fault:
    at_s: float
    what: str
    down_s: float


@dataclass
class Run:
    faults: list[Fault] = field(default_factory=list)
    submitted: list[JobSpec] = field(default_factory=list)
    resent_chunks: int = 0
    cancels: list[str] = field(default_factory=list)  # jobs a cancel was sent for
    submitting: bool = True


async def _sent(send: Callable[[], Awaitable[object]]) -> int:
    """``await send()`` until Kafka takes it (while it is down, nothing is accepted: try again
    every second); how many tries failed."""
    failed = 0
    while True:
        try:
            await send()
            return failed
        except Exception:
            failed += 1
            await asyncio.sleep(1.0)


async def submit(live: LiveStack, jobs: list[JobSpec], rate: float, run: Run) -> None:
    """Chunks of a second's jobs each second; a chunk Kafka did not take whole is sent again."""
    chunk = max(1, round(rate))
    began = time.monotonic()
    for start in range(0, len(jobs), chunk):
        part = jobs[start : start + chunk]
        run.resent_chunks += await _sent(functools.partial(stack.submit, part, live.settings))
        run.submitted += part
        await asyncio.sleep(max(0.0, began + start / rate + 1.0 - time.monotonic()))
    run.submitting = False


async def change_tree(live: LiveStack, gpus: int, seconds: float) -> None:
    """The mix's second tree, halfway through: ``research``'s max lowered (sent again until
    Kafka and PostgreSQL take it)."""
    await asyncio.sleep(seconds / 2)
    lowered = chaos_mix.tree(gpus, chaos_mix.RESEARCH_MAX_LATER)
    await _sent(functools.partial(stack.apply_queues, lowered, live.settings))


async def cancel(live: LiveStack, share: float, seed: int, run: Run) -> None:
    """Cancel a seeded ``share`` of the submitted jobs, each 0.2-3 s after it was submitted."""
    rng = np.random.default_rng([seed, 3])
    seen = 0
    pending: list[tuple[float, str]] = []  # (when to send, job)
    while run.submitting or seen < len(run.submitted) or pending:
        now = time.monotonic()
        for spec in run.submitted[seen:]:
            if rng.random() < share:
                pending.append((now + float(rng.uniform(0.2, 3.0)), spec.id))
        seen = len(run.submitted)
        due = [job_id for at, job_id in pending if at <= now]
        pending = [(at, job_id) for at, job_id in pending if at > now]
        for job_id in due:
            command = CancelJob(job_id=job_id, reason="chaos")
            await _sent(functools.partial(stack.send_command, command, live.settings))
            run.cancels.append(job_id)
        await asyncio.sleep(0.2)


async def strike(live: LiveStack, rng: np.random.Generator, servers: bool, began: float, run: Run) -> None:
    """One fault, chosen by ``rng``, and the recovery from it."""
    choices = [*live.commands, *(("kafka", "postgres") if servers else ())]
    what = str(rng.choice(choices))
    if what in ("kafka", "postgres"):
        down = float(rng.uniform(3.0, 8.0))
        run.faults.append(Fault(time.monotonic() - began, f"crash {what}", down))
        await asyncio.to_thread(crash, what)
        try:
            await asyncio.sleep(down)
        finally:
            await asyncio.to_thread(restart, what)
        return
    down = float(rng.uniform(0.2, 1.0)) if what == "agent" else float(rng.uniform(0.2, 3.0))
    run.faults.append(Fault(time.monotonic() - began, f"kill {what}", down))
    await live.kill(what)
    await asyncio.sleep(down)
    await live.restart(what)


async def chaos(
    live: LiveStack, seconds: float, seed: int, servers: bool, run: Run, progress: Progress
) -> None:
    rng = np.random.default_rng(seed)
    began = time.monotonic()
    task = progress.add_task("faults while jobs flow", total=seconds)
    while time.monotonic() - began < seconds:
        await asyncio.sleep(float(rng.uniform(4.0, 10.0)))
        if time.monotonic() - began >= seconds:
            break
        await strike(live, rng, servers, began, run)
        progress.update(task, completed=min(seconds, time.monotonic() - began))
    progress.update(task, completed=seconds)


async def main_async(args: argparse.Namespace, console: Console) -> dict[str, object]:
    settings = Settings()
    servers = args.servers and own_servers()
    database = await create_database(settings.database_url)
    folder = Path(tempfile.mkdtemp(prefix="tessera-chaos-"))
    live = LiveStack(settings.kafka_bootstrap_servers, database, f"chaos{uuid.uuid4().hex[:8]}", folder)
    # Leases shorter than a server outage: a Kafka outage must not be taken for lost nodes.
    live.env.update(TESSERA_HEARTBEAT_S="1", TESSERA_LEASE_S="6", TESSERA_REQUEUE_AFTER_S="1")
    run = Run()
    nodes = MIX_NODE_COUNT if args.mix else NODE_COUNT
    gpus = sum(n.gpu_count for n in load_nodes(Path(NODES))[:nodes])
    if args.mix:
        # Run times 500x shorter than the trace's, as without the mix, but declared so (the agent
        # runs them as declared) and at most 30 s, on a third of the nodes: the cluster fills,
        # so high-priority jobs wait and evict, gangs reserve, queues meet their max.
        jobs = trace_specs(round(args.rate * args.seconds), 500, uuid.uuid4().hex[:6], longest_s=30.0)
        jobs = [chaos_mix.mixed(j, args.seed) for j in jobs]
        live.env.update(chaos_mix.PREEMPTION_ENV)
    else:
        jobs = trace_specs(round(args.rate * args.seconds), 500, uuid.uuid4().hex[:6])
    try:
        with console.status("starting the stack"):
            await live.standard(workers=2, agent=agent(nodes, 1.0 if args.mix else 500.0))
            if args.mix:
                await stack.apply_queues(chaos_mix.tree(gpus, chaos_mix.RESEARCH_MAX), live.settings)
        with Progress(console=console) as progress:
            await asyncio.gather(
                submit(live, jobs, args.rate, run),
                chaos(live, args.seconds, args.seed, servers, run, progress),
                cancel(live, args.cancel_share, args.seed, run),
                *([change_tree(live, gpus, args.seconds)] if args.mix else []),
            )
        ids = [j.id for j in run.submitted]
        with console.status(f"waiting for {len(ids)} jobs to end"):
            states = await live.wait_terminal(ids, timeout=args.drain_s)
        events = await log_of(database)
        replay_error = ""
        try:
            replay = ClusterView()
            replay.apply_all(events)
            if replay.cluster is None or replay.cluster.used_gpu_milli() != 0:
                replay_error = "GPUs still held at the end"
        except Exception as exc:  # the cluster model refuses an over-commit
            replay_error = repr(exc)
        mix = chaos_mix.mix_faults(events)
        outcome = collections.Counter(states.values())
        exited = {n: p.returncode for n, p in live.procs.items() if p.returncode is not None}
        return {
            "faults": len(run.faults),
            "fault_list": [(round(f.at_s, 1), f.what, round(f.down_s, 1)) for f in run.faults],
            "jobs": len(ids),
            "finished": outcome.get("finished", 0),
            "cancels_sent": len(run.cancels),
            "cancelled": outcome.get("cancelled", 0),
            # Of those, how many held resources when the cancel came (stopped as an eviction).
            "cancelled_running": len({e.stream for e in events if e.type == "CancelRequested"}),
            # Rejected is an answer (a pod too large for the nodes is ``impossible``); lost
            # is a job accepted by Kafka that never reached an end.
            "rejected": sum(n for state, n in outcome.items() if state.startswith("rejected")),
            "lost": sum(
                n
                for state, n in outcome.items()
                if state not in TERMINAL and not state.startswith("rejected")
            ),
            "states": dict(outcome),
            **{
                k: v
                # A rejected job (a pod too large for the nodes is ``impossible``) is neither
                # admitted nor placed: the checks are of the jobs admission accepted.
                for k, v in delivery_faults(
                    events,
                    [j for j in ids if not states[j].startswith("rejected")],
                    may_be_unplaced=run.cancels,
                    per_attempt=args.mix,
                ).items()
                if k != "tasks_started"
            },
            "max_passed": mix.max_passed,
            "placed_short": mix.placed_short,
            "reserved_twice": mix.reserved_twice,
            "mix": {
                "gangs_placed": mix.gangs,
                "elastic_placed": mix.elastic,
                "placements_under_a_max": mix.max_checked,
                "reservations": mix.reservations,
                "shared_by_preemptors": mix.shared_by_preemptors,
                "evictions": sum(1 for e in events if e.type == "JobPreempted"),
                "shrinks": sum(1 for e in events if e.type == "JobResized"),
                "trees_applied": sum(1 for e in events if e.type == "QueuesApplied"),
            },
            "replay_error": replay_error,
            "services_exited": len(exited),
            "resent_chunks": run.resent_chunks,
            "servers_crashed": servers,
        }
    finally:
        await live.stop()
        await live.delete_topics()
        if args.keep_db:
            console.print(f"the log is kept in {database} (drop the database when done)")
        else:
            await drop_database(settings.database_url, database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long jobs flow and faults strike")
    parser.add_argument("--rate", type=float, default=10.0, help="jobs submitted per second")
    parser.add_argument("--seed", type=int, default=1, help="chooses the faults and when they strike")
    parser.add_argument(
        "--servers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also crash Kafka and PostgreSQL (only the project's own, infra/)",
    )
    parser.add_argument(
        "--drain-s", type=float, default=300.0, help="how long the jobs may take to end after"
    )
    parser.add_argument(
        "--cancel-share", type=float, default=0.05, help="share of the jobs cancelled soon after submission"
    )
    parser.add_argument(
        "--keep-db", action="store_true", help="keep the run's database (its log) to look into afterwards"
    )
    parser.add_argument(
        "--mix",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="queues with a max (lowered halfway), priorities, gangs, elastic jobs (loadtests/chaos_mix.py)",
    )
    args = parser.parse_args()
    console = Console(width=120)
    r = asyncio.run(main_async(args, console))
    faults = Table(title=f"faults (seed {args.seed})")
    for col in ("at s", "fault", "down s"):
        faults.add_column(col, justify="left" if col == "fault" else "right")
    for at, what, down in r.pop("fault_list"):  # type: ignore[attr-defined]
        faults.add_row(f"{at:.1f}", what, f"{down:.1f}")
    console.print(faults)
    checks = Table(title=f"{r['jobs']} jobs submitted over {args.seconds:g} s")
    checks.add_column("check")
    checks.add_column("value", justify="right")
    bad = [
        "lost",
        "admitted_not_once",
        "placed_not_once",
        "tasks_started_twice",
        "tasks_ended_twice",
        "tasks_never_ended",
        "services_exited",
        "max_passed",
        "placed_short",
        "reserved_twice",
    ]
    shown = ("finished", "cancels_sent", "cancelled", "cancelled_running", "rejected")
    for key in (*shown, *bad, "replay_error", "resent_chunks"):
        checks.add_row(key, str(r[key]) or "none")
    for key, value in r["mix"].items():  # type: ignore[attr-defined]
        checks.add_row(f"mix: {key}", str(value))
    console.print(checks)
    print(json.dumps(r))
    if any(r[k] for k in bad) or r["replay_error"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
