"""``tessera``: simulate policies on traces, write schemas, run the stack."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from schemas.queues import duration_s, duration_text
from shared.cli.reach import run_reaching
from shared.core.plugins.order.priority_age import RequeueAt
from shared.core.plugins.order.within import OrderWithin
from shared.core.priority import PRIORITY_CLASSES
from shared.core.queues import LargeJobRule
from shared.core.registry import DEFAULT_POLICY, POLICY_NAMES, check_options
from shared.sim.operator import LARGE_GPUS
from shared.sim.policies import TIMELINE_POLICIES
from shared.sim.trace import TraceError

TRACES = Path(__file__).resolve().parents[2] / "loadtests" / "traces" / "alibaba-gpu-v2023"
DEFAULT_NODES = TRACES / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACES / "openb_pod_list_default.csv"

app = typer.Typer(
    help="Tessera: an event-driven, fragmentation-aware scheduler for GPU and CPU AI clusters.",
    no_args_is_help=True,
    add_completion=False,
    # Docstrings wrap at 100 columns: markdown joins their lines into paragraphs (rich mode kept
    # every break) and shows ``names`` as code, not with their backticks.
    rich_markup_mode="markdown",
)
console = Console()


class Mode(StrEnum):
    fill = "fill"
    timeline = "timeline"


PHILLY = Path(__file__).resolve().parents[2] / "loadtests" / "traces" / "philly"
PHILLY_JITTER_S = 60.0
"""A Philly seed's largest delay of an arrival: the trace's bursts (median gap 10 s) reorder."""


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
    arrival_jitter: Annotated[
        float | None,
        typer.Option(
            help="timeline with --philly: each seed delays every arrival by a uniform draw of up to "
            f"this many seconds (default {PHILLY_JITTER_S:g}), so that jobs submitted in one burst "
            "come in each seed's own order (Philly's nodes are all alike: with 0 every seed replays "
            "the same run)"
        ),
    ] = None,
    scorer: Annotated[
        str, typer.Option(help="timeline: the placement scorer every policy uses")
    ] = DEFAULT_POLICY,
    scorer_options: Annotated[
        str,
        typer.Option(
            help="the scorer's knobs as JSON, e.g. '{\"scarcity\": false}' (as TESSERA_SCORER_OPTIONS): "
            "fill: for every policy given (each must take them); timeline: for --scorer"
        ),
    ] = "{}",
    requeue_at: Annotated[
        RequeueAt,
        typer.Option(
            help="timeline: where tessera's evicted jobs queue again, as TESSERA_REQUEUE_TIMESTAMP: "
            "eviction (jobs that never ran go first) or creation (at their submission time)"
        ),
    ] = "eviction",
    order_within: Annotated[
        OrderWithin,
        typer.Option(
            help="timeline: tessera's order within a priority class, as TESSERA_ORDER_WITHIN: age "
            "(oldest first) or response-ratio (highest (wait + expected run time) / expected run time "
            "first, expected from a declared duration, else the learnt mean)"
        ),
    ] = "age",
    declared_durations: Annotated[
        float | None,
        typer.Option(
            help="timeline with --philly: every job declares a duration, its run time times "
            "exp(SIGMA x N(0,1)) (0: exact; 1: off by a factor of 2.7 typically); unset: none, "
            "as the trace is"
        ),
    ] = None,
    runtimes: Annotated[
        Path | None,
        typer.Option(
            help="timeline with --philly: a CSV of run times in seconds (a header, then one per line; "
            f"Philly's logged ones: {PHILLY.name}/philly_runtimes.csv) from which each job draws its "
            "run time, each seed its own draw, instead of total steps / throughput; the cluster is "
            "sized from the expected draw"
        ),
    ] = None,
    large_class: Annotated[
        str | None,
        typer.Option(
            help="timeline: every job that needs at least --large-gpus GPUs to start gets this priority "
            "class (critical, high, normal, best-effort) where the trace gives it a lower one, as if "
            "every queue had the rule large-jobs; unset: the trace's classes"
        ),
    ] = None,
    large_gpus: Annotated[
        float | None,
        typer.Option(
            help=f"timeline with --large-class: the GPUs a job needs to start from which it applies "
            f"({LARGE_GPUS:g})"
        ),
    ] = None,
    preempt_after: Annotated[
        str | None,
        typer.Option(
            help="timeline: every queue's preempt-after (e.g. 24h, 90m, 3600): a job waiting this long "
            "may preempt lower-priority work anywhere; unset: never, as the trace's queues are built"
        ),
    ] = None,
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
    jitter = PHILLY_JITTER_S if arrival_jitter is None else arrival_jitter
    if compress < 0 or not 0 < load <= 2 or not 0 <= elastic_fraction <= 1 or jitter < 0:
        raise typer.BadParameter(
            "--compress >= 0, 0 < --load <= 2, 0 <= --elastic-fraction <= 1, --arrival-jitter >= 0"
        )
    if arrival_jitter is not None and philly is None:
        # A pod list's seeds already differ (each draws its node order): nothing to jitter.
        raise typer.BadParameter(
            "only a Philly workload takes it: add --philly", param_hint="--arrival-jitter"
        )
    if requeue_at != "eviction" and mode is not Mode.timeline:
        raise typer.BadParameter("only a timeline run evicts: add --mode timeline", param_hint="--requeue-at")
    if order_within != "age" and mode is not Mode.timeline:
        raise typer.BadParameter("a timeline run's order: add --mode timeline", param_hint="--order-within")
    if declared_durations is not None and (philly is None or declared_durations < 0):
        raise typer.BadParameter(
            "a Philly timeline run's error, at least 0", param_hint="--declared-durations"
        )
    if philly is not None and mode is not Mode.timeline:
        raise typer.BadParameter(
            "Philly traces have no fill protocol: add --mode timeline", param_hint="--philly"
        )
    if runtimes is not None and philly is None:
        raise typer.BadParameter(
            "only a Philly workload draws run times: add --philly", param_hint="--runtimes"
        )
    if (large_class is not None or preempt_after is not None) and mode is not Mode.timeline:
        raise typer.BadParameter(
            "classes and preempt-after act in a timeline run: add --mode timeline",
            param_hint="--large-class/--preempt-after",
        )
    if large_class is not None and large_class not in PRIORITY_CLASSES:
        raise typer.BadParameter(f"choose from {', '.join(PRIORITY_CLASSES)}", param_hint="--large-class")
    if large_gpus is not None and (large_class is None or large_gpus <= 0):
        raise typer.BadParameter("a positive number, with --large-class", param_hint="--large-gpus")
    try:
        after_s = None if preempt_after is None else duration_s(preempt_after)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--preempt-after") from None
    source = Source(
        nodes,
        pods,
        philly,
        throughputs if philly is not None else None,
        load,
        compress,
        elastic_fraction,
        jitter if philly is not None else 0.0,
        declared_durations,
        runtimes,
        None if large_class is None else LargeJobRule(large_gpus or LARGE_GPUS, large_class),
        after_s,
    )
    try:
        options = json.loads(scorer_options)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--scorer-options") from None
    if not isinstance(options, dict):
        raise typer.BadParameter("a JSON object of knob: value", param_hint="--scorer-options")
    for name in chosen if mode is Mode.fill else [scorer]:
        try:
            check_options(name, options)
        except ValueError as exc:  # a knob the policy does not take, or a bad value
            raise typer.BadParameter(str(exc), param_hint="--scorer-options") from None
    try:
        run(
            source,
            chosen,
            seed_list,
            mode.value,
            out,
            inflation,
            workers,
            console,
            scorer,
            options,
            requeue_at,
            order_within,
        )
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
    metrics_port: Annotated[
        int,
        typer.Option(help="Prometheus metrics: one port per service from this one on (0: off)"),
    ] = 9400,
) -> None:
    """Start PostgreSQL and Kafka (if needed), then the relay, admission, placement workers and agent."""
    import asyncio
    import os
    import time

    from shared.cli import stack
    from shared.cli.reach import where_postgres
    from shared.settings import Settings
    from shared.state import readiness

    settings = Settings()
    named = {
        "postgres.sh": f"PostgreSQL at {where_postgres(settings.database_url)}",
        "kafka.sh": f"Kafka at {settings.kafka_bootstrap_servers}",
    }
    for script, own in stack.own_servers(settings).items():
        if not own:  # someone else's server: reached, never started or stopped from here
            console.print(f"using {named[script]} (not the project's own: not started here)")
        elif _infra(script, "up") != 0:
            raise typer.Exit(1)
    url = settings.database_url
    try:
        created = asyncio.run(stack.ensure_database(url))
    except Exception as exc:  # refused, wrong password, a missing database elsewhere
        console.print(f"[red]PostgreSQL at {where_postgres(url)}: {exc}[/red]")
        raise typer.Exit(1) from None
    if created:
        console.print(f"created database {created} on {where_postgres(url)}")
    commands = stack.service_commands(workers, agent.value, nodes, limit or None, speedup, policy)
    ready = dict(zip(commands, stack.ready_names(commands), strict=True))  # process -> marker
    readiness.clear(ready.values())
    pids = {}
    for i, (name, argv) in enumerate(commands.items()):
        env, served = os.environ.copy(), ""
        if metrics_port:
            env["TESSERA_METRICS_PORT"] = str(metrics_port + i)
            served = f"  metrics :{metrics_port + i}"
        pids[name] = stack.start(name, argv, env)
        console.print(f"{name:<12} pid {pids[name]}  log .local/logs/{name}.log{served}")
    deadline = time.monotonic() + 90
    while missing := readiness.not_ready(ready.values()):
        # A service that exits (a bad setting, a server it cannot use) says why in its log's
        # last line: show it now rather than after the whole wait.
        gone = [name for name, pid in pids.items() if stack.exited(pid)]
        if gone:
            for name in gone:
                console.print(f"[red]{name} exited: {stack.last_error(name)}[/red]")
            stack.stop_all()
            raise typer.Exit(1)
        if time.monotonic() > deadline:
            console.print(f"[red]not ready after 90 s: {', '.join(missing)} (see .local/logs)[/red]")
            raise typer.Exit(1)
        time.sleep(0.2)
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
    run_reaching(stack.submit(specs), f"submitting {job_file}", console)
    for spec in specs:
        console.print(f"submitted {spec.id} ({spec.replicas} replica(s)) to queue {spec.queue}")
    if wait:
        states = run_reaching(stack.wait_for([s.id for s in specs], timeout), "following the jobs", console)
        for job, state in states.items():
            console.print(f"{job}: {state}")
        if any(state != "finished" for state in states.values()):
            raise typer.Exit(1)


@app.command()
def cancel(
    job_ids: Annotated[list[str], typer.Argument(help="ids of the jobs to cancel")],
    reason: Annotated[str, typer.Option(help="recorded with the JobCancelled event")] = "",
    wait: Annotated[float, typer.Option(help="seconds to wait until each job has ended (0: no wait)")] = 30.0,
) -> None:
    """Cancel jobs: a waiting one never starts; a running one is stopped as an eviction stops
    it (SIGTERM, then SIGKILL after `TESSERA_PREEMPT_GRACE_S` if it checkpoints, at once if
    not), its room given back as its tasks stop.  A job that has ended already stays as it ended."""
    from schemas import CancelJob
    from shared.cli import stack
    from shared.state.fold import TERMINAL

    for job in job_ids:
        run_reaching(stack.send_command(CancelJob(job_id=job, reason=reason)), f"cancelling {job}", console)
        console.print(f"cancel of {job} sent")
    if not wait:
        return
    states = run_reaching(stack.wait_for(job_ids, wait), "following the jobs", console)
    for job, state in states.items():
        console.print(f"{job}: {state}")
    if any(state not in TERMINAL for state in states.values()):
        raise typer.Exit(1)


def _node_command(node: str, drain: bool, reason: str, wait: float) -> None:
    import time

    from schemas import DrainNode, UncordonNode
    from shared.cli import stack

    command = DrainNode(node=node, reason=reason) if drain else UncordonNode(node=node)
    run_reaching(stack.send_command(command), "sending the command", console)
    console.print(f"{'drain' if drain else 'uncordon'} of {node} sent")
    deadline = time.time() + wait
    while time.time() < deadline:
        view, _ = run_reaching(stack.read_view(), "reading the cluster's state", console)
        c = view.condition(node)
        if drain and c.drained:
            console.print(f"{node} drained: nothing runs there, nothing new goes there")
            return
        if not drain and not c.cordoned:
            console.print(f"{node} takes work again")
            return
        time.sleep(1.0)
    if wait:
        console.print(f"[yellow]{node} not there yet after {wait:g} s (see tessera status)[/yellow]")
        raise typer.Exit(1)


@app.command()
def drain(
    node: Annotated[str, typer.Argument(help="node name as registered")],
    reason: Annotated[str, typer.Option(help="recorded with the NodeCordoned event")] = "",
    wait: Annotated[float, typer.Option(help="seconds to wait for NodeDrained (0: do not wait)")] = 120.0,
) -> None:
    """Cordon NODE and evict its jobs with the checkpoint protocol (they are requeued); ends
    with NodeDrained once nothing runs there."""
    _node_command(node, True, reason, wait)


@app.command()
def uncordon(
    node: Annotated[str, typer.Argument(help="node name as registered")],
    wait: Annotated[float, typer.Option(help="seconds to wait until it takes work (0: do not wait)")] = 30.0,
) -> None:
    """Let a cordoned or drained NODE take work again."""
    _node_command(node, False, "", wait)


@app.command()
def status(jobs: Annotated[int, typer.Option(help="how many recent jobs to list")] = 15) -> None:
    """Nodes, queues and jobs as the event store has them; a waiting job with why it waits, as
    the placement workers' last cycles said."""

    from rich.table import Table

    from shared.cli import stack
    from shared.settings import Settings

    view, rejections = run_reaching(stack.read_view(), "reading the cluster's state", console)
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
    unusual = {n: c for n, c in sorted(view.conditions.items()) if not c.schedulable}
    for name, c in unusual.items():
        what = (
            "NotReady" if not c.ready else ("drained" if c.drained else "draining" if c.drain else "cordoned")
        )
        console.print(f"[yellow]node {name}: {what}[/yellow]")
    console.print(queue_table(view, console.width))
    why, kinds = stack.waiting_reasons(Settings().stats_dir)
    recent = Table(title=f"latest {jobs} jobs ({view.admitted} admitted, {len(rejections)} rejected)")
    latest = sorted(view.jobs.values(), key=lambda r: -r.admitted_at)[:jobs]
    for col in ("job", "tenant", "queue"):  # ids and names whole: an operator types them back
        width = max((len(getattr(r.spec, col if col != "job" else "id")) for r in latest), default=0)
        recent.add_column(col, no_wrap=True, min_width=max(len(col), min(width, 40)))
    for col in ("state", "nodes or why it waits"):
        recent.add_column(col)
    for record in latest:
        where = ",".join(sorted({b.node for b in record.bindings}))
        if record.state == "pending":
            where = why.get(record.spec.id, stack.NOT_LOOKED_AT)
        recent.add_row(record.spec.id, record.spec.tenant, record.spec.queue, record.activity, where)
    console.print(recent)
    if kinds:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        console.print(f"waiting, by why (the placement workers' last cycles): {counts}")
    for job, reason in list(rejections.items())[-5:]:
        console.print(f"[yellow]rejected {job}: {reason}[/yellow]")


@app.command()
def describe(job: Annotated[str, typer.Argument(help="the job's id")]) -> None:
    """One job's story from the event log: admission (or rejection), reservations, placements,
    starts, preemptions and ends, each with its time since admission; if it waits, why."""
    from rich.table import Table

    from shared.cli import stack
    from shared.cli.describe import summary
    from shared.settings import Settings
    from shared.state.fold import job_state

    events = run_reaching(stack.job_history(job), "reading the job's events", console)
    if not events:
        console.print(f"[red]no job {job!r} in the event log[/red]")
        raise typer.Exit(1)
    first = events[0].recorded_at.timestamp()
    table = Table(title=f"job {job}")
    for col in ("at", "event", "what"):
        table.add_column(col, justify="right" if col == "at" else "left")
    for e in events:
        at = e.recorded_at.timestamp() - first
        table.add_row(f"+{at:.1f} s", e.type, summary(e.type, e.data, first))
    console.print(table)
    state = job_state(events)
    if state is None:
        return  # rejected: the table says why
    console.print(f"now: {state[0]}")
    if state[0] == "pending":
        why, _ = stack.waiting_reasons(Settings().stats_dir)
        console.print(f"waiting: {why.get(job, stack.NOT_LOOKED_AT)}")


@app.command()
def demo(
    jobs: Annotated[int, typer.Option(help="openb pods to replay (the earliest by creation time)")] = 1200,
    share: Annotated[
        float, typer.Option(help="share of the openb GPU nodes simulated (every node kind kept)")
    ] = 0.02,
    workers: Annotated[int, typer.Option(help="placement workers")] = 2,
    speedup: Annotated[float, typer.Option(help="divide the trace's run times by this")] = 60.0,
    cap: Annotated[float, typer.Option(help="run times longer than this (s) are cut to it")] = 30.0,
    rate: Annotated[float, typer.Option(help="jobs produced per second")] = 40.0,
    settle: Annotated[
        float, typer.Option(help="seconds to wait for the jobs to end after the last submission")
    ] = 240.0,
    keep: Annotated[bool, typer.Option(help="leave the services running afterwards")] = False,
) -> None:
    """The main job: three teams' queues and a gang on a small, busy openb cluster, live through
    Kafka and PostgreSQL, then the same jobs simulated under FIFO and Tessera for comparison."""
    import asyncio
    import time

    from rich.progress import Progress

    from shared.cli import demo as d
    from shared.cli import stack
    from shared.settings import Settings
    from shared.sim.trace import load_nodes, load_pods

    if jobs < 1 or not 0 < share <= 1 or speedup <= 0 or cap <= 0 or rate <= 0:
        raise typer.BadParameter("--jobs >= 1, 0 < --share <= 1, --speedup, --cap and --rate > 0")
    infra_up()
    stopped = stack.stop_all()
    if stopped:
        console.print(f"stopped the running stack first: {', '.join(stopped)}")
    tag = time.strftime("%H%M%S")
    p = d.plan(
        load_nodes(TRACES / "openb_node_list_gpu_node.csv"),
        load_pods(DEFAULT_PODS),
        jobs,
        share,
        speedup,
        cap,
        tag,
        gang_after=int(10 * rate),
    )
    url = asyncio.run(d.fresh_database(Settings()))
    dropped = asyncio.run(d.drop_earlier_demos(Settings(), f"demo{tag}"))
    if dropped:
        console.print(f"deleted {len(dropped)} topics of earlier demos (their database is gone)")
    d.database_env(url, f"demo{tag}")
    nodes_csv = d.write_nodes(p.nodes, stack.ROOT / ".local" / "demo" / "nodes.csv")
    console.print(
        f"cluster: {len(p.nodes)} openb GPU nodes, {p.total_gpus} GPUs (a {100 * share:g}% sample of "
        f"every node kind); queues {', '.join(f'{t} (guarantee {d.TEAMS[t]:.0%})' for t in d.TEAMS)}"
    )
    # The jobs carry the demo's run times: the agent ends each after its duration-s as is.
    up(
        workers=workers,
        agent=AgentMode.simulated,
        nodes=nodes_csv,
        limit=0,
        speedup=1.0,
        policy=DEFAULT_POLICY,
    )
    asyncio.run(stack.apply_queues(p.tree))
    with Progress(console=console) as progress:
        view, live, alloc, sent, busiest = asyncio.run(d.run_live(p, rate, settle, progress, console))
    states: dict[str, int] = {}
    for s in p.jobs:
        state = view.jobs[s.id].state if s.id in view.jobs else "not admitted"
        states[state] = states.get(state, 0) + 1
    console.print("jobs: " + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    console.print(f"GPU allocation peaked at {max(alloc, default=0.0):.1f}% of {p.total_gpus} GPUs")
    if busiest is not None:
        busiest.title = "queues (GPUs) when the last job was produced"
        console.print(busiest)
    with console.status("replaying the same jobs in the simulator under fifo and tessera"):
        knobs = Settings().scorer_options  # the live workers' scorer, as they ran it
        fifo, ours = d.simulated(p, sent, "fifo", knobs), d.simulated(p, sent, "tessera", knobs)
    d.report(p, live, fifo, ours, console)
    console.print(f"the run's log: DATABASE_URL={url} TESSERA_TOPIC_PREFIX=demo{tag} tessera status")
    if not keep:
        stack.stop_all()
        console.print("services stopped (PostgreSQL and Kafka keep running: tessera infra down)")


def queue_table(view: object, width: int = 80) -> object:
    """Queues with guarantee, max, deserved share, usage and borrowing (GPUs) and job counts;
    under it, the queues' rules (the wait after which their jobs may preempt lower-priority work
    anywhere, the class their large jobs run at least at; inherited values count as the
    queue's) and the jobs the applied tree bars.  ``width``: the terminal's columns."""
    from rich import box
    from rich.table import Table

    from shared.state.fold import ClusterView
    from shared.state.queue_usage import outside_tree, queue_usage

    assert isinstance(view, ClusterView)
    # No inner borders, and the rules below the table rather than in columns, so that every
    # column stays whole on an 80-column terminal (rich would drop or cut those without room).
    table = Table(
        title="queues (GPUs)" + ("" if view.queues is not None else ": none applied, open queues"),
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    queues = queue_usage(view)
    depth = {"root": -1}
    rows: list[list[str]] = []
    rules: dict[str, list[str]] = {}
    for q in queues:
        depth[q.name] = depth.get(q.parent, -1) + 1
        rows.append(
            [
                "  " * depth[q.name] + q.name,
                f"{q.guarantee_gpu:g}",
                "∞" if q.max_gpu == float("inf") else f"{q.max_gpu:g}",
                f"{q.deserved_gpu:.1f}",
                f"{q.used_gpu:.1f}",
                f"{q.borrowed_gpu:.1f}",
                str(q.pending),
                str(q.running),
            ]
        )
        if q.preempt_after_s is not None:
            rule = f"jobs waiting {duration_text(q.preempt_after_s)} may preempt lower-priority work"
            rules.setdefault(rule, []).append(q.name)
        if q.large_jobs is not None:
            rule = f"jobs of >= {q.large_jobs.min_gpus:g} GPUs run at least at {q.large_jobs.priority_class}"
            rules.setdefault(rule, []).append(q.name)
    columns = ["queue", "guarantee", "max", "deserved", "used", "borrowed", "pending", "running"]
    widths = [max([len(col), *(len(row[i]) for row in rows)]) for i, col in enumerate(columns)]
    # Queue names whole (an operator types them back): folded onto a second line, never cut,
    # where the figures leave them too little room.
    room = width - sum(widths[1:]) - 2 * (len(columns) - 1)  # a blank rule and one space
    table.add_column("queue", overflow="fold", width=max(len("queue"), min(widths[0], room)))
    for col, w in zip(columns[1:], widths[1:], strict=True):
        table.add_column(col, justify="right", no_wrap=True, width=w)
    for row in rows:
        table.add_row(*row)
    lines = [f"{rule}: {', '.join(names)}" for rule, names in rules.items()]
    barred = outside_tree(view)
    if barred:
        listed = "; ".join(f"{why} ({p} pending, {r} running)" for why, (p, r) in barred.items())
        lines.append(
            f"jobs the applied tree bars (the pending ones wait for a tree that lets them in): {listed}"
        )
    if lines:
        table.caption = "\n".join(lines)
        table.caption_justify = "left"
    return table


queue_app = typer.Typer(help="The queue tree: weights, guarantees, limits, tenants (stored as events).")
app.add_typer(queue_app, name="queue")


@queue_app.command("apply")
def queue_apply(
    tree_file: Annotated[Path, typer.Argument(help="YAML queue tree (kind: QueueTree)")],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="validate and say which jobs the tree would bar; apply nothing")
    ] = False,
) -> None:
    """Validate a queue tree and produce it to Kafka; admission stores it as ``QueuesApplied``.
    The tree replaces the last one whole; what it would bar (jobs of queues it leaves out, of
    tenants it no longer allows) is said first."""

    import yaml
    from pydantic import ValidationError

    from schemas.queues import QueueTreeSpec
    from shared.cli import stack
    from shared.state.queue_usage import outside_tree
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
    view, _ = run_reaching(stack.read_view(), "reading the cluster's state", console)
    for why, (pending, running) in outside_tree(view, tree).items():
        # Kueue refuses to delete a ClusterQueue with admitted workloads; here the tree is applied
        # and the jobs are kept: the waiting ones wait for a tree that lets them in again.
        console.print(
            f"[yellow]{tree_file}: {why}; {running} such job(s) running run on, {pending} pending "
            "wait until a tree lets them in[/yellow]"
        )
    if dry_run:
        console.print(f"{tree_file}: valid, {len(tree.walk())} queue(s); not applied (--dry-run)")
        return
    run_reaching(stack.apply_queues(tree), "applying the queue tree", console)
    console.print(f"applied {len(tree.walk())} queue(s) from {tree_file}")


@queue_app.command("show")
def queue_show() -> None:
    """The queues as the event store has them: guarantee, deserved share, usage, borrowing."""

    from shared.cli import stack

    view, _ = run_reaching(stack.read_view(), "reading the cluster's state", console)
    console.print(queue_table(view, console.width))


@app.command()
def config(
    markdown: Annotated[bool, typer.Option(help="print the README's table (defaults only) instead")] = False,
) -> None:
    """Every setting: its environment variable, default, value now and meaning."""
    from pydantic import ValidationError
    from rich.table import Table

    from shared.settings import knobs, markdown_table, settings_errors

    if markdown:
        typer.echo(markdown_table(), nl=False)
        return
    try:
        rows = knobs()
    except ValidationError as exc:
        for line in settings_errors(exc):
            console.print(f"[red]{line}[/red]")
        raise typer.Exit(2) from None
    table = Table(title="settings (environment; `tessera config --markdown` for the README's table)")
    table.add_column("variable", no_wrap=True)
    for col in ("value", "default"):
        table.add_column(col, overflow="fold", max_width=24)
    table.add_column("meaning")
    for k in rows:
        changed = k.value != k.default
        table.add_row(k.variable, f"[bold]{k.value}[/bold]" if changed else k.value, k.default, k.meaning)
    console.print(table)


@app.command()
def schema(
    out: Annotated[Path, typer.Option(help="folder for the JSON Schema files")] = Path("out/schemas"),
) -> None:
    """Write the JSON Schema of every job spec, command and event."""
    from schemas.export import write_schemas

    for path in write_schemas(out):
        console.print(f"wrote {path}")


def main() -> None:
    """The ``tessera`` command: ``app``, where a bad setting in the environment is said in one
    line per variable (exit 2), as ``tessera config`` says it, not in a traceback from the first
    command that read the settings."""
    from pydantic import ValidationError

    from shared.settings import settings_errors

    try:
        app()
    except ValidationError as exc:
        if exc.title != "Settings":
            raise
        for line in settings_errors(exc):
            console.print(f"[red]{line}[/red]")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
