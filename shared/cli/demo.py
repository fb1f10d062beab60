"""``tessera demo``: the live stack at work on a small, busy cluster, next to what FIFO would do.

The demo is sized so that the scheduler has decisions to make: a stratified 2% of the openb GPU
nodes (every node kind kept, 33 nodes / 159 GPUs), three teams' queues with guarantees of 40, 35
and 25% of the GPUs, and the first 1,200 openb pods (by creation time) produced to Kafka at 40 jobs/s
with their run times divided by 60 and capped at 30 s, which offers about 1.6 times what the
cluster holds while they arrive.  Ten seconds in, a gang of three 8-GPU workers is submitted: it
waits, reserves the nodes it will use while they drain, and starts whole.  Right after it, an
elastic training job of one to four 8-GPU replicas (``elastic: "1:4"``, checkpointable, three
times the longest trace job's run time): it starts with as many as fit, and grows into the room
the other jobs leave once no waiting job can use it (each resize restarts its replicas from their
checkpoint at the new world size).

At the end the same jobs (the moments they were produced, their run times) are replayed by the
timeline simulator under ``fifo`` and ``tessera`` on the same nodes and queues: the live run
should look like the simulated ``tessera`` column, and the ``fifo`` column is what a plain FIFO
queue would have given.  Each run gets a database (``tessera_demo``) and topic prefix of its own,
so a demo never mixes with an earlier one or with a stack started by ``tessera up``.
"""

from __future__ import annotations

import asyncio
import csv
import os
import re
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from schemas.job import JobSpec
from schemas.queues import QueueTreeSpec
from shared.bus.topics import delete_topics
from shared.cli import stack
from shared.cli.simulate import node_sample
from shared.core.fragmentation import TypicalWorkload
from shared.core.registry import DEFAULT_POLICY, build_profile
from shared.core.task import NodeSpec
from shared.eventstore.databases import create_database
from shared.eventstore.port import RecordedEvent
from shared.eventstore.postgres import PostgresEventStore
from shared.settings import Settings
from shared.sim.metrics import SIZE_CLASSES, size_class, window_utilisation
from shared.sim.policies import timeline_config
from shared.sim.timeline import run_timeline
from shared.sim.trace import TracePod
from shared.sim.workload import SimJob, Workload
from shared.state.fold import ClusterView
from shared.state.follow import catch_up
from shared.state.queue_usage import queue_usage
from shared.state.wire import admitted_priority, queue_tree, task_shape

TEAMS = {"nlp": 0.40, "vision": 0.35, "speech": 0.25}
"""Each team's queue and its guaranteed share of the GPUs; pods go to a team by a hash of their name."""
GANG_ID = "demo-gang"
GANG_REPLICAS = 3
ELASTIC_ID = "demo-elastic"
ELASTIC_RANGE = (1, 4)
DATABASE = "tessera_demo"


@dataclass(frozen=True)
class DemoPlan:
    nodes: list[NodeSpec]
    tree: QueueTreeSpec
    jobs: list[JobSpec]  # in the order they are produced
    gang_after: int  # the gang is produced after this many trace jobs, the elastic job after it

    @property
    def total_gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes)


def team_of(name: str) -> str:
    teams = list(TEAMS)
    return teams[zlib.crc32(name.encode()) % len(teams)]


def plan(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    count: int,
    share: float,
    speedup: float,
    cap_s: float,
    tag: str,
    gang_after: int,
) -> DemoPlan:
    """The demo's cluster, queue tree and jobs; pure, so the simulator replays exactly these."""
    sample = node_sample(list(nodes), share)
    total = sum(n.gpu_count for n in sample)
    tree = QueueTreeSpec.model_validate(
        {
            "queues": [
                {
                    "name": team,
                    "tenants": [team, "demo"],
                    "guarantee": {"nvidia.com/gpu": int(total * frac)},  # floor: never above the cluster
                }
                for team, frac in TEAMS.items()
            ]
        }
    )
    jobs = []
    for p in sorted(pods, key=lambda p: (p.creation_time, p.name))[:count]:
        team = team_of(p.name)
        spec = stack.spec_from_trace(p, speedup, tenant=team, queue=team)
        duration = min(cap_s, spec.duration_s or cap_s)
        jobs.append(spec.model_copy(update={"id": f"{p.name.lower()}-{tag}", "duration_s": duration}))
    gang = JobSpec.model_validate(
        {
            "id": f"{GANG_ID}-{tag}",
            "tenant": "nlp",
            "queue": "nlp",
            "workload": "training",
            "replicas": GANG_REPLICAS,
            "gang": {"min-member": GANG_REPLICAS, "timeout-s": 120},
            "resources": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 8},
            "duration-s": 20,
            "checkpointable": True,
        }
    )
    elastic = JobSpec.model_validate(
        {
            "id": f"{ELASTIC_ID}-{tag}",
            "tenant": "vision",
            "queue": "vision",
            "workload": "training",
            "replicas": ELASTIC_RANGE[1],
            "elastic": f"{ELASTIC_RANGE[0]}:{ELASTIC_RANGE[1]}",
            "resources": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 8},
            "duration-s": 3 * cap_s,  # outlives the backlog, so it grows as the cluster drains
            "checkpointable": True,
        }
    )
    at = min(gang_after, len(jobs))
    jobs[at:at] = [gang, elastic]
    return DemoPlan(sample, tree, jobs, gang_after)


def as_workload(p: DemoPlan, sent: dict[str, float]) -> Workload:
    """The jobs as produced (``sent``: epoch seconds) for the timeline simulator, at the priority
    admission gave them (a queue's ``large-jobs`` rule included)."""
    t0 = min(sent.values())
    tree = queue_tree(p.tree)
    jobs = tuple(
        SimJob(
            id=s.id,
            queue=s.queue,
            tenant=s.tenant,
            shape=task_shape(s),
            replicas=s.max_replicas,
            min_replicas=s.min_replicas if s.min_replicas < s.max_replicas else 0,
            submit=sent[s.id] - t0,
            work_s=float(s.duration_s or 1.0),
            priority=admitted_priority(tree, s)[0],
            checkpointable=s.checkpointable,
            duration_s=s.duration_s,
        )
        for s in p.jobs
        if s.id in sent
    )
    return Workload("demo", tuple(p.nodes), jobs, tree)


def demo_class(gpus: float) -> str:
    """Finer than the simulator's classes at the small end, where nearly all openb pods are."""
    if gpus == 0:
        return "CPU only"
    if gpus < 1:
        return "GPU share"
    return size_class(gpus)


DEMO_CLASSES = ("CPU only", "GPU share", *SIZE_CLASSES)


@dataclass
class Figures:
    """One run's outcome, live or simulated: waits by size class and GPU-time by queue."""

    waits: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in DEMO_CLASSES})
    gpu_s: dict[str, float] = field(default_factory=dict)
    utilisation: float = 0.0
    gang_wait: float | None = None

    def p95(self, cls: str) -> str:
        v = self.waits[cls]
        return f"{np.percentile(v, 95):.1f}" if v else "—"

    def share(self, queue: str) -> str:
        total = sum(self.gpu_s.values())
        return f"{100 * self.gpu_s.get(queue, 0.0) / total:.0f}%" if total else "—"


def simulated(
    p: DemoPlan, sent: dict[str, float], policy: str, options: Mapping[str, float | bool] | None = None
) -> Figures:
    """The demo's jobs replayed under ``policy``, placed by the scorer the live workers use (with
    their ``TESSERA_SCORER_OPTIONS``), so live and simulated differ only where they must."""
    w = as_workload(p, sent)
    profile = build_profile(DEFAULT_POLICY, TypicalWorkload.from_tasks(j.shape for j in w.jobs), options)
    r = run_timeline(w, policy, timeline_config(policy, profile), 42)
    out = Figures()
    for j in r.jobs:
        out.waits[demo_class(j.spec.gpus)].append(j.waited)
        if not j.spec.id.startswith(ELASTIC_ID):  # it runs on alone after the others: not in the shares
            out.gpu_s[j.spec.queue] = out.gpu_s.get(j.spec.queue, 0.0) + j.used_gpu_s
        if j.spec.id.startswith(GANG_ID):
            out.gang_wait = j.waited
    out.utilisation = window_utilisation(r)
    return out


async def fresh_database(settings: Settings) -> str:
    """``tessera_demo`` next to the configured database, dropped and created empty."""
    return await create_database(settings.database_url, DATABASE, replace=True)


def write_nodes(nodes: Sequence[NodeSpec], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        out = csv.writer(handle, lineterminator="\n")
        out.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for n in nodes:
            out.writerow([n.name, n.cpu_milli, n.memory_mib, n.gpu_count, n.gpu_model])
    return path


async def run_live(
    p: DemoPlan, rate: float, settle_s: float, progress: Progress, console: Console
) -> tuple[ClusterView, Figures, list[float], dict[str, float], Table | None]:
    """Produce the jobs while following the log, until every job ended (or ``settle_s`` after
    the last was produced), sampling GPU allocation and each queue's GPUs once a second; returns
    the final view, the live figures, the samples, the send times, and the queue table as it
    stood when the last job was produced."""
    from shared.cli.main import queue_table

    settings = Settings()
    store = await PostgresEventStore.connect(settings.database_url, max_size=2)
    view = ClusterView()
    live = Figures()
    alloc: list[float] = []
    ids = [s.id for s in p.jobs]
    produce = progress.add_task(f"producing {len(ids)} jobs to Kafka at {rate:g}/s", total=len(ids))
    sending = asyncio.create_task(
        stack.submit(p.jobs, rate=rate, on_sent=lambda n: progress.advance(produce, n))
    )
    bar = progress.add_task("jobs ended", total=len(ids))
    busiest: Table | None = None
    deadline = float("inf")
    gang_id = p.jobs[p.gang_after].id
    elastic_id = p.jobs[p.gang_after + 1].id
    try:
        while time.time() < deadline:
            began = time.time()
            await catch_up(view, store)
            cluster = view.cluster
            if not sending.done() and cluster is not None and cluster.total_gpu_milli:
                alloc.append(100 * cluster.used_gpu_milli() / cluster.total_gpu_milli)
                el = view.jobs.get(elastic_id)
                el_gpus = 0.0
                if el is not None and el.status.active:  # the shares compare the trace jobs and the gang
                    el_gpus = el.shape.total_gpu_milli * (len(el.bindings) + len(el.growing)) / 1000
                for q in queue_usage(view):
                    if q.name in TEAMS:
                        used = q.used_gpu - (el_gpus if el is not None and el.spec.queue == q.name else 0.0)
                        live.gpu_s[q.name] = live.gpu_s.get(q.name, 0.0) + used
            if sending.done() and busiest is None:
                busiest = queue_table(view, console.width)  # type: ignore[assignment]
                deadline = time.time() + settle_s
            ended = sum(1 for j in ids if j in view.jobs and view.jobs[j].status.terminal)
            gang = view.jobs.get(gang_id)
            el = view.jobs.get(elastic_id)
            used = 100 * cluster.used_gpu_milli() / cluster.total_gpu_milli if cluster else 0.0
            progress.update(
                bar,
                completed=ended,
                description=f"GPUs {used:.0f}% | gang {gang.state if gang else 'not yet'} | "
                f"elastic {el.activity if el else 'not yet'} ({len(el.bindings) if el else 0} replicas) | "
                "jobs ended",
            )
            if ended == len(ids):
                break
            await asyncio.sleep(max(0.0, 1.0 - (time.time() - began)))
        sent = await sending
        el_events = await store.read_stream(f"job-{elastic_id}")
        # A resize restarts the job on a new placement: its wait ends at its first.
        first = {
            elastic_id: next((e.recorded_at.timestamp() for e in el_events if e.type == "JobPlaced"), 0.0)
        }
        for s in p.jobs:
            r = view.jobs.get(s.id)
            if r is not None and r.placed_time and s.id in sent:
                gpus = r.shape.total_gpu_milli * s.replicas / 1000
                placed = first.get(s.id) or r.placed_time
                live.waits[demo_class(gpus)].append(max(0.0, placed - sent[s.id]))
        live.utilisation = float(np.mean(alloc)) if alloc else 0.0
        events = await store.read_stream(f"job-{gang_id}")
        times = {e.type: e.recorded_at.timestamp() for e in reversed(events)}
        if gang_id in sent:
            t0 = sent[gang_id]
            steps = [f"produced at +{t0 - min(sent.values()):.1f} s"]
            for kind, words in (("JobReserved", "reserved"), ("JobPlaced", "placed whole")):
                if kind in times:
                    steps.append(f"{words} {times[kind] - t0:.1f} s later")
            if "JobReserved" in times:
                reserved = next(e for e in events if e.type == "JobReserved")
                steps.append(f"on {', '.join(reserved.data['nodes'])}")
            console.print(f"gang {gang_id} ({GANG_REPLICAS} x 8 GPUs): " + ", ".join(steps))
            if "JobPlaced" in times:
                live.gang_wait = times["JobPlaced"] - t0
        if elastic_id in sent:
            history = resize_history(el_events, sent[elastic_id])
            lo, hi = ELASTIC_RANGE
            console.print(f"elastic {elastic_id} ({lo}-{hi} x 8 GPUs): " + ", ".join(history))
        return view, live, alloc, sent, busiest
    finally:
        await store.close()


def resize_history(events: Sequence[RecordedEvent], sent: float) -> list[str]:
    """An elastic job's life from its stream: when it was placed and with how many replicas,
    each grow and shrink (asked, then done), and how it ended; times from when it was produced."""
    out = ["produced at 0 s"]
    for e in events:
        at = e.recorded_at.timestamp() - sent
        if e.type == "JobPlaced":
            out.append(f"placed with {len(e.data['bindings'])} at +{at:.1f} s")
        elif e.type == "JobGrowRequested":
            out.append(f"grow to {e.data['replicas']} asked at +{at:.1f} s")
        elif e.type == "PreemptionRequested" and e.data.get("resize_to") is not None:
            out.append(f"shrink to {e.data['resize_to']} for {e.data['by_job']} asked at +{at:.1f} s")
        elif e.type == "JobResized":
            out.append(f"restarted with {e.data['replicas']} at +{at:.1f} s")
        elif e.type == "JobPreempted":
            out.append(f"preempted at +{at:.1f} s")
    ends = [e for e in events if e.type in ("JobFinished", "JobFailed")]
    if ends:
        last = ends[-1]
        word = "failed" if any(e.type == "JobFailed" for e in ends) else "finished"
        out.append(f"{word} at +{last.recorded_at.timestamp() - sent:.1f} s")
    return out


def report(p: DemoPlan, live: Figures, fifo: Figures, ours: Figures, console: Console) -> None:
    waits = Table(title="p95 wait from produced to placed (s), by GPUs per job")
    for col in ("job size", "jobs", "live (tessera)", "simulated tessera", "simulated fifo"):
        waits.add_column(col, justify="left" if col == "job size" else "right")
    for cls in DEMO_CLASSES:
        waits.add_row(cls, str(len(fifo.waits[cls])), live.p95(cls), ours.p95(cls), fifo.p95(cls))
    gang = (live.gang_wait, ours.gang_wait, fifo.gang_wait)
    waits.add_row("the gang", "1", *(f"{g:.1f}" if g is not None else "—" for g in gang))
    console.print(waits)
    shares = Table(
        title="share of the GPU-time each queue's jobs received, the elastic job aside "
        "(live: while jobs arrived; simulated: whole run)"
    )
    for col in ("queue", "guarantee", "live (tessera)", "simulated tessera", "simulated fifo"):
        shares.add_column(col, justify="left" if col == "queue" else "right")
    for team, frac in TEAMS.items():
        shares.add_row(team, f"{100 * frac:.0f}%", live.share(team), ours.share(team), fifo.share(team))
    console.print(shares)
    console.print(
        f"mean GPU allocation while jobs arrived: live {live.utilisation:.1f}%, "
        f"simulated tessera {ours.utilisation:.1f}%, simulated fifo {fifo.utilisation:.1f}%"
    )
    del p


EARLIER_DEMO = re.compile(r"demo\d{6}\.[a-z]+")


def earlier_demo(topic: str, prefix: str) -> bool:
    """Whether ``topic`` is an earlier demo's (``demoHHMMSS.*``), not this one's (``prefix``)."""
    return EARLIER_DEMO.fullmatch(topic) is not None and not topic.startswith(f"{prefix}.")


async def drop_earlier_demos(settings: Settings, prefix: str) -> list[str]:
    """The topics of earlier demos: their database has just been dropped, so nothing will read
    them again."""
    return await delete_topics(settings.kafka_bootstrap_servers, lambda name: earlier_demo(name, prefix))


def database_env(url: str, prefix: str) -> None:
    """Point this process (and the services it starts) at the demo's database and topics."""
    os.environ["DATABASE_URL"] = url
    os.environ["TESSERA_TOPIC_PREFIX"] = prefix
