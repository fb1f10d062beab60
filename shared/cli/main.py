"""``tessera``: simulate policies on traces, write schemas, run the stack."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from shared.core.registry import DEFAULT_POLICY, POLICY_NAMES
from shared.sim.policies import TIMELINE_POLICIES
from shared.sim.trace import TraceError

TRACES = Path(__file__).resolve().parents[2] / "loadtests" / "traces" / "alibaba-gpu-v2023"
DEFAULT_NODES = TRACES / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACES / "openb_pod_list_default.csv"

app = typer.Typer(
    help="Tessera: an event-driven, fragmentation-aware scheduler for GPU and CPU AI clusters.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()


class Mode(StrEnum):
    fill = "fill"
    timeline = "timeline"


PHILLY = Path(__file__).resolve().parents[2] / "loadtests" / "traces" / "philly"


@app.command()
def simulate(
    nodes: Annotated[
        Path, typer.Option(help="node list CSV (sn, cpu_milli, memory_mib, gpu, model)")
    ] = DEFAULT_NODES,
    pods: Annotated[
        Path, typer.Option(help="pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli, ...)")
    ] = DEFAULT_PODS,
    philly: Annotated[
        Path | None,
        typer.Option(help="timeline: a folder of Philly *.trace files (Gavel's per-VC traces), merged"),
    ] = None,
    throughputs: Annotated[
        Path, typer.Option(help="timeline with --philly: Gavel's isolated throughputs CSV")
    ] = PHILLY / "gavel_isolated_throughputs.csv",
    policy: Annotated[
        str,
        typer.Option(
            help=f"comma-separated; fill: {' '.join(POLICY_NAMES)}; timeline: {' '.join(TIMELINE_POLICIES)}"
        ),
    ] = DEFAULT_POLICY,
    seeds: Annotated[str, typer.Option(help="seeds, e.g. 42-51 or 42,43")] = "42",
    mode: Annotated[
        Mode, typer.Option(help="fill: FGD paper protocol; timeline: arrivals, waits, preemptions, ends")
    ] = Mode.fill,
    out: Annotated[Path, typer.Option(help="output folder for summary.json, curves.csv, figures")] = Path(
        "out/sim"
    ),
    inflation: Annotated[
        float, typer.Option(help="fill: arrive pods up to this multiple of the cluster's GPUs")
    ] = 1.3,
    load: Annotated[
        float,
        typer.Option(
            help="timeline: the offered load to reach (Philly: by sizing the cluster; a pod list: by "
            "compressing its arrivals)"
        ),
    ] = 0.9,
    compress: Annotated[
        float,
        typer.Option(
            help="timeline: divide arrival times by this (run times unchanged); 0: a pod list is "
            "replayed 50x faster on the share of its nodes that makes the offered load --load, "
            "Philly arrivals as they are"
        ),
    ] = 0.0,
    elastic_fraction: Annotated[
        float, typer.Option(help="timeline with --philly: share of 2-8 GPU jobs made elastic (1..k)")
    ] = 0.0,
    scorer: Annotated[
        str, typer.Option(help="timeline: the placement scorer every policy uses")
    ] = DEFAULT_POLICY,
    workers: Annotated[int, typer.Option(help="parallel processes (0: one per CPU core)")] = 0,
) -> None:
    """Replay a trace through the scheduling core and compare policies.

    fill: the FGD paper's protocol (pods arrive in random order and never leave).  timeline:
    jobs arrive at their trace times and run their trace durations under a scheduling policy
    (fifo, fifo-backfill, drf, las, sjf, tessera), with queues, waits, preemptions and fairness.
    """
    from shared.cli.simulate import Source, parse_seeds
    from shared.cli.simulate import simulate as run

    names = TIMELINE_POLICIES if mode is Mode.timeline else POLICY_NAMES
    chosen = [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in names]
    if unknown or not chosen:
        raise typer.BadParameter(
            f"unknown {mode.value} policy {unknown}; choose from {', '.join(names)}", param_hint="--policy"
        )
    if scorer not in POLICY_NAMES:
        raise typer.BadParameter(f"choose from {', '.join(POLICY_NAMES)}", param_hint="--scorer")
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--seeds") from None
    if inflation < 1.0:
        raise typer.BadParameter("must be at least 1.0", param_hint="--inflation")
    if compress < 0 or not 0 < load <= 2 or not 0 <= elastic_fraction <= 1:
        raise typer.BadParameter("--compress >= 0, 0 < --load <= 2, 0 <= --elastic-fraction <= 1")
    if philly is not None and mode is not Mode.timeline:
        raise typer.BadParameter(
            "Philly traces have no fill protocol: add --mode timeline", param_hint="--philly"
        )
    source = Source(
        nodes, pods, philly, throughputs if philly is not None else None, load, compress, elastic_fraction
    )
    try:
        run(source, chosen, seed_list, mode.value, out, inflation, workers, console, scorer)
    except TraceError as exc:
        console.print(f"[red]trace error:[/red] {exc}")
        raise typer.Exit(2) from None


@app.command()
def bound(
    nodes: Annotated[Path, typer.Option(help="node list CSV")] = DEFAULT_NODES,
    pods: Annotated[Path, typer.Option(help="pod list CSV")] = DEFAULT_PODS,
    seeds: Annotated[str, typer.Option(help="seeds of the fill order, e.g. 42-51")] = "42-44",
    arrived: Annotated[str, typer.Option(help="arrived GPU load(s) in %, e.g. 90,95,100")] = "100",
    out: Annotated[Path, typer.Option(help="output folder for bound.json")] = Path("out/bound"),
    inflation: Annotated[float, typer.Option(help="as in simulate --mode fill")] = 1.3,
    workers: Annotated[int, typer.Option(help="parallel processes (0: one per CPU core)")] = 0,
) -> None:
    """Upper bound on the GPU share any policy could allocate at an arrived load (fill protocol):
    a clairvoyant offline packing of the same pods, bounded by a configuration LP (HiGHS)."""
    from shared.cli.bound import bound as run
    from shared.cli.simulate import parse_seeds

    try:
        seed_list = parse_seeds(seeds)
        points = sorted({int(a) for a in arrived.split(",") if a.strip()})
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not points or any(not 1 <= a <= 130 for a in points):
        raise typer.BadParameter("arrived loads must lie in 1..130", param_hint="--arrived")
    try:
        run(nodes, pods, seed_list, points, out, inflation, workers, console)
    except TraceError as exc:
        console.print(f"[red]trace error:[/red] {exc}")
        raise typer.Exit(2) from None


infra_app = typer.Typer(help="Native PostgreSQL and Kafka (KRaft) under .local/, no Docker needed.")
app.add_typer(infra_app, name="infra")
ROOT = Path(__file__).resolve().parents[2]


def _infra(script: str, action: str) -> int:
    import subprocess

    return subprocess.run([str(ROOT / "infra" / script), action], check=False).returncode


@infra_app.command("up")
def infra_up() -> None:
    """Install (if missing) and start PostgreSQL and Kafka; print their addresses.  Idempotent."""
    for script in ("postgres.sh", "kafka.sh"):
        if _infra(script, "up") != 0:
            raise typer.Exit(1)


@infra_app.command("down")
def infra_down() -> None:
    """Stop Kafka and PostgreSQL (their data stays under .local/)."""
    for script in ("kafka.sh", "postgres.sh"):
        _infra(script, "down")


@infra_app.command("status")
def infra_status() -> None:
    """Say whether each server answers; exit 3 if one does not."""
    codes = [_infra(script, "status") for script in ("postgres.sh", "kafka.sh")]
    if any(codes):
        raise typer.Exit(3)


class AgentMode(StrEnum):
    simulated = "simulated"
    process = "process"


@app.command()
def up(
    workers: Annotated[int, typer.Option(help="placement workers (one consumer group)")] = 2,
    agent: Annotated[
        AgentMode, typer.Option(help="simulated nodes from a CSV, or this machine as one node")
    ] = (AgentMode.simulated),
    nodes: Annotated[Path, typer.Option(help="simulated agent: node list CSV")] = TRACES
    / "openb_node_list_gpu_node.csv",
    limit: Annotated[int, typer.Option(help="simulated agent: first N nodes (0: all)")] = 0,
    speedup: Annotated[float, typer.Option(help="simulated agent: divide job durations by this")] = 60.0,
    policy: Annotated[str, typer.Option(help="placement policy")] = DEFAULT_POLICY,
) -> None:
    """Start PostgreSQL and Kafka (if needed), then the relay, admission, placement workers and agent."""
    from shared.cli import stack
    from shared.state import readiness

    infra_up()
    commands = stack.service_commands(workers, agent.value, nodes, limit or None, speedup, policy)
    readiness.clear(stack.ready_names(commands))
    for name, argv in commands.items():
        console.print(f"{name:<12} pid {stack.start(name, argv)}  log .local/logs/{name}.log")
    missing = readiness.wait_ready(stack.ready_names(commands), timeout=90)
    if missing:
        console.print(f"[red]not ready after 90 s: {', '.join(missing)} (see .local/logs)[/red]")
        raise typer.Exit(1)
    console.print("all services ready")


@app.command()
def down(
    keep_infra: Annotated[bool, typer.Option(help="leave PostgreSQL and Kafka running")] = False,
) -> None:
    """Stop every service started by ``tessera up`` (and the servers unless --keep-infra)."""
    from shared.cli import stack

    stopped = stack.stop_all()
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    if not keep_infra:
        infra_down()


@app.command()
def submit(
    job_file: Annotated[Path, typer.Argument(help="YAML job file (one or more documents)")],
    wait: Annotated[bool, typer.Option(help="follow the job(s) until they end")] = False,
    timeout: Annotated[float, typer.Option(help="--wait: give up after this many seconds")] = 600.0,
) -> None:
    """Validate a job file and produce it to Kafka (tessera.submissions)."""
    import asyncio

    from pydantic import ValidationError

    from shared.cli import stack

    try:
        specs = stack.load_job_file(job_file)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            console.print(f"[red]{job_file}: {where}: {err['msg']}[/red]")
        raise typer.Exit(2) from None
    from shared.state.honoured import unhonoured

    refused = {spec.id: unhonoured(spec) for spec in specs if unhonoured(spec)}
    for job, reasons in refused.items():
        for reason in reasons:
            console.print(f"[red]{job_file}: {job}: {reason}[/red]")
    if refused:
        raise typer.Exit(2)
    asyncio.run(stack.submit(specs))
    for spec in specs:
        console.print(f"submitted {spec.id} ({spec.replicas} replica(s)) to queue {spec.queue}")
    if wait:
        states = asyncio.run(stack.wait_for([s.id for s in specs], timeout))
        for job, state in states.items():
            console.print(f"{job}: {state}")
        if any(state != "finished" for state in states.values()):
            raise typer.Exit(1)


@app.command()
def status(jobs: Annotated[int, typer.Option(help="how many recent jobs to list")] = 15) -> None:
    """Nodes, queues and jobs as the event store has them."""
    import asyncio

    from rich.table import Table

    from shared.cli import stack

    view, rejections = asyncio.run(stack.read_view())
    services = stack.running_services()
    console.print(f"services: {', '.join(f'{n}({p})' for n, p in services.items()) or 'none running'}")
    cluster = view.cluster
    nodes = Table(title="nodes")
    for col in ("GPU model", "nodes", "GPUs", "GPU used %", "CPU used %"):
        nodes.add_column(col, justify="right" if col != "GPU model" else "left")
    if cluster is not None:
        import numpy as np

        for m, model in enumerate((*cluster.models, "")):
            mask = cluster.model_idx == (m if model else -1)
            if not mask.any():
                continue
            gcap = cluster.gpu_cap[mask].sum()
            used = 100 * (gcap - cluster.gpu_free[mask].sum()) / gcap if gcap else 0.0
            cpu_used = 100 * (1 - cluster.cpu_free[mask].sum() / max(1, cluster.cpu_cap[mask].sum()))
            nodes.add_row(
                model or "(CPU only)",
                str(int(mask.sum())),
                str(int(np.sum(cluster.gpu_count[mask]))),
                f"{used:.1f}",
                f"{cpu_used:.1f}",
            )
    console.print(nodes)
    console.print(queue_table(view))
    recent = Table(title=f"latest {jobs} jobs ({len(view.jobs)} admitted, {len(rejections)} rejected)")
    for col in ("job", "tenant", "queue", "state", "nodes"):
        recent.add_column(col)
    for record in sorted(view.jobs.values(), key=lambda r: -r.admitted_at)[:jobs]:
        recent.add_row(
            record.spec.id,
            record.spec.tenant,
            record.spec.queue,
            record.state,
            ",".join(sorted({b.node for b in record.bindings})),
        )
    console.print(recent)
    for job, reason in list(rejections.items())[-5:]:
        console.print(f"[yellow]rejected {job}: {reason}[/yellow]")


@app.command()
def demo(
    jobs: Annotated[int, typer.Option(help="openb pods to replay (the earliest by creation time)")] = 2000,
    nodes_limit: Annotated[int, typer.Option("--nodes", help="simulated openb GPU nodes (0: all 1,213)")] = 0,
    workers: Annotated[int, typer.Option(help="placement workers")] = 2,
    speedup: Annotated[float, typer.Option(help="divide the trace's run times by this")] = 600.0,
    settle: Annotated[
        float, typer.Option(help="seconds to wait for placements after the last submission")
    ] = 60.0,
    keep: Annotated[bool, typer.Option(help="leave the services running afterwards")] = False,
    rate: Annotated[
        float, typer.Option(help="jobs produced per second (0: as fast as Kafka acknowledges them)")
    ] = 200.0,
) -> None:
    """The main job: bring the stack up on simulated openb nodes, replay the trace through Kafka, report."""
    import asyncio
    import time

    import numpy as np
    from rich.progress import Progress

    from shared.cli import stack
    from shared.sim.trace import load_pods

    up(
        workers=workers,
        agent=AgentMode.simulated,
        nodes=TRACES / "openb_node_list_gpu_node.csv",
        limit=nodes_limit,
        speedup=speedup,
        policy=DEFAULT_POLICY,
    )
    pods = sorted(load_pods(DEFAULT_PODS), key=lambda p: (p.creation_time, p.name))[:jobs]
    run_tag = time.strftime("%H%M%S")
    specs = [stack.spec_from_trace(p, speedup).model_copy(update={"id": f"{p.name}-{run_tag}"}) for p in pods]
    start = asyncio.run(stack.log_head())
    with Progress(console=console) as progress:
        pace = f" at {rate:.0f} jobs/s" if rate > 0 else ""
        task = progress.add_task(f"submitting through Kafka{pace}", total=len(specs))
        sent = asyncio.run(
            stack.submit(specs, rate=rate or None, on_sent=lambda n: progress.advance(task, n))
        )
        task2 = progress.add_task("waiting for placements", total=len(specs))
        deadline = time.time() + settle
        while time.time() < deadline:
            view, rejected = asyncio.run(stack.read_view())
            placed = sum(1 for j in specs if j.id in view.jobs and view.jobs[j.id].state != "pending")
            progress.update(task2, completed=placed + sum(1 for j in specs if j.id in rejected))
            if placed + sum(1 for j in specs if j.id in rejected) >= len(specs):
                break
            time.sleep(1)
    view, rejected = asyncio.run(stack.read_view())
    mine = [view.jobs[s.id] for s in specs if s.id in view.jobs]
    states: dict[str, int] = {}
    for r in mine:
        states[r.state] = states.get(r.state, 0) + 1
    latency = np.array(asyncio.run(stack.placement_latencies(sent))) * 1000
    cluster = view.cluster
    alloc = 100 * cluster.used_gpu_milli() / cluster.total_gpu_milli if cluster is not None else 0.0
    n_rejected = sum(1 for s in specs if s.id in rejected)
    console.print(f"jobs submitted {len(specs)}, admitted {len(mine)}, rejected {n_rejected}")
    console.print("states: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    peak, _ = asyncio.run(stack.peak_allocation(since=start))
    console.print(
        f"GPU allocation peaked at {peak:.1f}% during the run, now {alloc:.1f}%, "
        f"of {cluster.total_gpu_milli // 1000 if cluster else 0} GPUs"
    )
    if latency.size:
        console.print(
            f"submit-to-placement latency p50 {np.percentile(latency, 50):.0f} ms, "
            f"p99 {np.percentile(latency, 99):.0f} ms over {latency.size} placed jobs"
        )
    if not keep:
        stack.stop_all()
        console.print("services stopped (PostgreSQL and Kafka keep running: tessera infra down)")


def queue_table(view: object) -> object:
    """Queues with guarantee, max, deserved share, usage and borrowing (GPUs), and job counts."""
    from rich.table import Table

    from shared.state.fold import ClusterView
    from shared.state.queue_usage import queue_usage

    assert isinstance(view, ClusterView)
    table = Table(title="queues (GPUs)" + ("" if view.queues is not None else ": none applied, open queues"))
    for col in ("queue", "guarantee", "max", "deserved", "used", "borrowed", "pending", "running"):
        table.add_column(col, justify="left" if col == "queue" else "right")
    depth = {"root": -1}
    for q in queue_usage(view):
        depth[q.name] = depth.get(q.parent, -1) + 1
        table.add_row(
            "  " * depth[q.name] + q.name,
            f"{q.guarantee_gpu:g}",
            "∞" if q.max_gpu == float("inf") else f"{q.max_gpu:g}",
            f"{q.deserved_gpu:.1f}",
            f"{q.used_gpu:.1f}",
            f"{q.borrowed_gpu:.1f}",
            str(q.pending),
            str(q.running),
        )
    return table


queue_app = typer.Typer(help="The queue tree: weights, guarantees, limits, tenants (stored as events).")
app.add_typer(queue_app, name="queue")


@queue_app.command("apply")
def queue_apply(
    tree_file: Annotated[Path, typer.Argument(help="YAML queue tree (kind: QueueTree)")],
) -> None:
    """Validate a queue tree and produce it to Kafka; admission stores it as ``QueuesApplied``."""
    import asyncio

    import yaml
    from pydantic import ValidationError

    from schemas.queues import QueueTreeSpec
    from shared.cli import stack
    from shared.state.wire import queue_tree

    try:
        tree = QueueTreeSpec.model_validate(yaml.safe_load(tree_file.read_text()))
        queue_tree(tree)
    except ValidationError as exc:
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            console.print(f"[red]{tree_file}: {where}: {err['msg']}[/red]")
        raise typer.Exit(2) from None
    except ValueError as exc:
        console.print(f"[red]{tree_file}: {exc}[/red]")
        raise typer.Exit(2) from None
    asyncio.run(stack.apply_queues(tree))
    console.print(f"applied {len(tree.walk())} queue(s) from {tree_file}")


@queue_app.command("show")
def queue_show() -> None:
    """The queues as the event store has them: guarantee, deserved share, usage, borrowing."""
    import asyncio

    from shared.cli import stack

    view, _ = asyncio.run(stack.read_view())
    console.print(queue_table(view))


@app.command()
def schema(
    out: Annotated[Path, typer.Option(help="folder for the JSON Schema files")] = Path("out/schemas"),
) -> None:
    """Write the JSON Schema of every job spec, command and event."""
    from schemas.export import write_schemas

    for path in write_schemas(out):
        console.print(f"wrote {path}")


if __name__ == "__main__":
    app()
