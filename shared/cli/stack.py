"""Running the live stack as separate processes: ``tessera up``, ``down``, ``submit``, ``status``.

Each service is started detached (its own session) with its log in ``.local/logs/<name>.log`` and
its pid in ``.local/run/<name>.pid``; ``down`` stops them with SIGTERM (SIGKILL after 10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import asyncpg
import yaml

from schemas import ApplyQueues, CancelJob, DrainNode, JobSpec, SubmitJob, UncordonNode
from schemas.queues import QueueTreeSpec
from shared.bus import BusProducer
from shared.eventstore.databases import beside, create_database, database_name
from shared.eventstore.port import RecordedEvent
from shared.eventstore.postgres import PostgresEventStore
from shared.service import service_topics
from shared.settings import Settings
from shared.sim.trace import TracePod
from shared.state.fold import TERMINAL, ClusterView
from shared.state.follow import catch_up, restore
from shared.state.wire import job_stream

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / ".local" / "run"
LOGS = ROOT / ".local" / "logs"


def service_commands(
    workers: int, agent: str, nodes: Path | None, limit: int | None, speedup: float, policy: str
) -> dict[str, list[str]]:
    py = sys.executable
    commands = {
        "relay": [py, "-m", "shared.eventstore.relay"],
        "admission": [py, "-m", "services.admission.app"],
        "preemption": [py, "-m", "services.preemption.app"],
    }
    for i in range(1, workers + 1):
        commands[f"placement-{i}"] = [
            py,
            "-m",
            "services.placement.app",
            "--name",
            f"w{i}",
            "--policy",
            policy,
        ]
        if workers > 1:  # each prefers its own share of the nodes: without it they race for the same ones
            commands[f"placement-{i}"] += ["--shard", f"{i - 1}/{workers}"]
    if agent == "simulated":
        assert nodes is not None
        argv = [
            py,
            "-m",
            "services.agent.app",
            "--mode",
            "simulated",
            "--nodes",
            str(nodes),
            "--speedup",
            str(speedup),
        ]
        if limit:
            argv += ["--limit", str(limit)]
        commands["agent"] = argv
    else:
        commands["agent"] = [py, "-m", "services.agent.app", "--mode", "process"]
    return commands


def ready_names(commands: dict[str, list[str]]) -> list[str]:
    """The readiness marker each started service writes (placement-N writes placement-wN)."""
    return [f"placement-w{n.split('-')[1]}" if n.startswith("placement-") else n for n in commands]


def pid_of(name: str) -> int | None:
    path = RUN / f"{name}.pid"
    try:
        pid = int(path.read_text())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def start(name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Start one service unless it runs already; returns its pid."""
    running = pid_of(name)
    if running is not None:
        return running
    RUN.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    log = (LOGS / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        list(argv),
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env or os.environ.copy(),
    )
    (RUN / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def exited(pid: int) -> bool:
    """Whether the service process ``pid`` is gone.  One this process started is reaped (a dead
    child stays a zombie, which ``kill(pid, 0)`` still finds); any other is looked up."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    except ChildProcessError:  # not our child: started by an earlier ``tessera up``
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        return False


def last_error(name: str) -> str:
    """The last line of a service's log: where a service that exited says why."""
    try:
        lines = (LOGS / f"{name}.log").read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return next((line.strip() for line in reversed(lines) if line.strip()), "(empty log)")


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def own_servers(settings: Settings) -> dict[str, bool]:
    """Per infra script (``postgres.sh``, ``kafka.sh``): whether the settings name the server it
    runs (a loopback address at the script's port, ``TESSERA_PG_PORT`` / ``TESSERA_KAFKA_PORT``).
    A server elsewhere is someone else's: ``tessera up`` does not start one for it."""
    pg = urllib.parse.urlsplit(settings.database_url)
    kafka = urllib.parse.urlsplit("//" + settings.kafka_bootstrap_servers.split(",")[0].strip())
    return {
        "postgres.sh": pg.hostname in LOOPBACK
        and (pg.port or 5432) == int(os.environ.get("TESSERA_PG_PORT", "15432")),
        "kafka.sh": kafka.hostname in LOOPBACK
        and (kafka.port or 9092) == int(os.environ.get("TESSERA_KAFKA_PORT", "19092")),
    }


async def ensure_database(url: str) -> str | None:
    """Create the database ``url`` names if its server answers without it; returns its name if
    it was created.  Only on a loopback server (the one ``tessera infra`` runs): elsewhere a
    missing database is more likely a typo in ``DATABASE_URL`` than a wish, and its error goes
    to the caller."""
    try:
        conn = await asyncpg.connect(url)
    except asyncpg.InvalidCatalogNameError:
        name = database_name(url)
        if urllib.parse.urlsplit(url).hostname not in LOOPBACK or not name:
            raise
        await create_database(beside(url, "postgres"), name)
        return name
    await conn.close()
    return None


def running_services() -> dict[str, int]:
    out = {}
    for path in sorted(RUN.glob("*.pid")) if RUN.exists() else []:
        pid = pid_of(path.stem)
        if pid is not None:
            out[path.stem] = pid
    return out


NOT_LOOKED_AT = "not yet looked at by a placement worker"
"""A waiting job no running worker's last cycle named (``tessera status``, ``tessera describe``)."""
STATS_FRESH_S = 30.0
"""A worker's file not rewritten for this long is a stopped worker's (a live one writes each second)."""


def waiting_reasons(folder: Path, now: float | None = None) -> tuple[dict[str, str], dict[str, int]]:
    """Why jobs wait, as the running placement workers' last cycles said (their
    ``placement-*.json`` under ``TESSERA_STATS_DIR``, a stopped worker's left out): each listed
    job's reason, and how many wait for each kind."""
    why: dict[str, str] = {}
    kinds: dict[str, int] = {}
    now = time.time() if now is None else now
    for path in sorted(folder.glob("placement-*.json")) if folder.exists() else []:
        try:
            if now - path.stat().st_mtime > STATS_FRESH_S:
                continue
            body = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced: the next status reads it
        why.update(body.get("waiting", {}))
        for kind, n in body.get("waiting_kinds", {}).items():
            kinds[kind] = kinds.get(kind, 0) + int(n)
    return why, kinds


def stop_all(names: Iterable[str] | None = None, timeout: float = 10.0) -> list[str]:
    targets = {n: p for n, p in running_services().items() if names is None or n in names}
    for pid in targets.values():
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline and any(pid_of(n) for n in targets):
        time.sleep(0.2)
    for name, pid in targets.items():
        if pid_of(name) is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        (RUN / f"{name}.pid").unlink(missing_ok=True)
    return sorted(targets)


def load_job_file(path: Path) -> list[JobSpec]:
    """All job documents of a YAML file; a ValidationError names the field."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return [JobSpec.model_validate(d) for d in docs]


def spec_from_trace(
    pod: TracePod, speed: float = 1.0, tenant: str = "openb", queue: str = "default"
) -> JobSpec:
    s = pod.shape
    resources: dict[str, object] = {"cpu": f"{s.cpu_milli}m", "memory": f"{max(1, s.memory_mib)}Mi"}
    if s.is_shared:
        resources["gpu-share"] = f"{s.gpu_milli}m"
    elif s.num_gpu:
        resources["nvidia.com/gpu"] = s.num_gpu
    duration = (pod.deletion_time - pod.creation_time) if pod.deletion_time is not None else 600.0
    body: dict[str, object] = {
        "id": pod.name.lower(),
        "tenant": tenant,
        "queue": queue,
        "resources": resources,
        "duration-s": max(1.0, duration) / speed,
    }
    if s.gpu_models:
        body["gpu-type"] = list(s.gpu_models)
    return JobSpec.model_validate(body)


async def submit(
    specs: Sequence[JobSpec],
    settings: Settings | None = None,
    rate: float | None = None,
    on_sent: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Produce ``SubmitJob`` for each spec, ``rate`` per second (None: as fast as the broker
    acknowledges them), calling ``on_sent(1)`` after each; returns the send time of each job id."""
    settings = settings or Settings()
    await service_topics(settings, settings.cli_reach_s)
    sent: dict[str, float] = {}
    async with BusProducer(settings.kafka_bootstrap_servers, client_id="tessera-cli") as producer:
        began = time.perf_counter()
        for i, spec in enumerate(specs):
            if rate:
                await asyncio.sleep(max(0.0, began + i / rate - time.perf_counter()))
            sent[spec.id] = time.time()
            await producer.send_model(settings.topics.submissions, SubmitJob(spec=spec), key=spec.id)
            if on_sent is not None:
                on_sent(1)
    return sent


async def send_command(
    command: DrainNode | UncordonNode | CancelJob, settings: Settings | None = None
) -> None:
    """Produce a node command (admission turns it into ``NodeCordoned`` / ``NodeUncordoned``) or
    a cancel (``JobCancelled``, or ``CancelRequested`` for a job that holds resources).  A cancel
    is keyed by its job, as the job's submission is, so
    both land on one partition and admission sees them in the order they were produced."""
    settings = settings or Settings()
    await service_topics(settings, settings.cli_reach_s)
    key = command.job_id if isinstance(command, CancelJob) else f"node-{command.node}"
    async with BusProducer(settings.kafka_bootstrap_servers, client_id="tessera-cli") as producer:
        await producer.send_model(settings.topics.submissions, command, key=key)


async def apply_queues(tree: QueueTreeSpec, settings: Settings | None = None) -> None:
    """Produce ``ApplyQueues`` (admission appends ``QueuesApplied``) and wait until it is in the log."""
    settings = settings or Settings()
    await service_topics(settings, settings.cli_reach_s)
    store = await PostgresEventStore.connect(settings.database_url, max_size=1)
    try:
        before = len(await store.read_stream("queues"))
        async with BusProducer(settings.kafka_bootstrap_servers, client_id="tessera-cli") as producer:
            await producer.send_model(settings.topics.submissions, ApplyQueues(tree=tree), key="queues")
        for _ in range(150):
            if len(await store.read_stream("queues")) > before:
                return
            await asyncio.sleep(0.2)
        raise TimeoutError("the queue tree did not reach the event log in 30 s: is admission running?")
    finally:
        await store.close()


async def log_head(settings: Settings | None = None) -> int:
    """The event log's last position (where a run starts)."""
    store = await PostgresEventStore.connect((settings or Settings()).database_url, max_size=1)
    try:
        return await store.last_position()
    finally:
        await store.close()


async def peak_allocation(settings: Settings | None = None, since: int = 0) -> tuple[float, int]:
    """Replay the log and return the highest GPU allocation % it reached after position ``since``
    (the state is replayed from the start either way) and at which position."""
    settings = settings or Settings()
    store = await PostgresEventStore.connect(settings.database_url, max_size=2)
    try:
        view, best, where, position = ClusterView(), 0.0, 0, 0
        while events := await store.read_all(position, 5000):
            for e in events:
                view.apply(e)
                cluster = view.cluster
                if (
                    e.position > since
                    and e.type == "JobPlaced"
                    and cluster is not None
                    and cluster.total_gpu_milli
                ):
                    used = 100 * cluster.used_gpu_milli() / cluster.total_gpu_milli
                    if used > best:
                        best, where = used, e.position
            position = events[-1].position
        return best, where
    finally:
        await store.close()


async def job_history(job_id: str, settings: Settings | None = None) -> list[RecordedEvent]:
    """Every event of one job, in order: its own stream's (admission, reservations, placements,
    starts and ends, preemptions), or its rejection's."""
    settings = settings or Settings()
    store = await PostgresEventStore.connect(settings.database_url, max_size=1)
    try:
        return await store.read_stream(job_stream(job_id)) or await store.read_stream(f"rejected-{job_id}")
    finally:
        await store.close()


async def read_view(settings: Settings | None = None) -> tuple[ClusterView, dict[str, str]]:
    """The cluster as the event store has it (the newest snapshot plus the log after it, keeping
    the ended jobs a service keeps), and the rejections by job id."""
    settings = settings or Settings()
    store = await PostgresEventStore.connect(settings.database_url, max_size=2)
    try:
        view = await restore(store, keep_ended=settings.keep_ended_jobs)
        rejections: dict[str, str] = {}
        position = 0
        while events := await store.read_all(position, 5000, types=["JobRejected"]):
            for e in events:
                rejections[str(e.data["job_id"])] = f"{e.data['code']}: {e.data['reason']}"
            position = events[-1].position
        return view, rejections
    finally:
        await store.close()


async def wait_for(
    job_ids: Iterable[str], timeout: float, settings: Settings | None = None
) -> dict[str, str]:
    """Poll the event store until every job is terminal or rejected (or ``timeout``)."""
    settings = settings or Settings()
    wanted = set(job_ids)
    store = await PostgresEventStore.connect(settings.database_url, max_size=2)
    view = ClusterView()
    rejected: dict[str, str] = {}
    deadline = time.time() + timeout
    try:
        while True:
            await catch_up(view, store)
            for job in wanted - set(rejected) - set(view.jobs):
                for e in await store.read_stream(f"rejected-{job}"):
                    rejected[job] = f"rejected ({e.data['code']}): {e.data['reason']}"
            # An admitted job's state wins over a later rejection of a resubmission with its id.
            states: dict[str, str] = {j: view.jobs[j].state for j in wanted if j in view.jobs}
            states.update({j: rejected.get(j, "submitted") for j in wanted if j not in view.jobs})
            if (
                all(s in TERMINAL or s.startswith("rejected") for s in states.values())
                or time.time() > deadline
            ):
                return states
            await asyncio.sleep(0.3)
    finally:
        await store.close()


async def placement_latencies(sent: dict[str, float], settings: Settings | None = None) -> list[float]:
    """Seconds from submission to the ``JobPlaced`` commit, for every submitted job placed so far."""
    settings = settings or Settings()
    store = await PostgresEventStore.connect(settings.database_url, max_size=2)
    try:
        out = []
        for job, t0 in sent.items():
            for e in await store.read_stream(f"job-{job}"):
                if e.type == "JobPlaced":
                    out.append(e.recorded_at.timestamp() - t0)
                    break
        return out
    finally:
        await store.close()
