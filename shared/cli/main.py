"""``tessera``: simulate policies on traces, write schemas, run the stack."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from shared.core.registry import DEFAULT_POLICY, POLICY_NAMES
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


@app.command()
def simulate(
    nodes: Annotated[
        Path, typer.Option(help="node list CSV (sn, cpu_milli, memory_mib, gpu, model)")
    ] = DEFAULT_NODES,
    pods: Annotated[
        Path, typer.Option(help="pod list CSV (name, cpu_milli, memory_mib, num_gpu, gpu_milli, ...)")
    ] = DEFAULT_PODS,
    policy: Annotated[
        str, typer.Option(help=f"comma-separated policies: {' '.join(POLICY_NAMES)}")
    ] = DEFAULT_POLICY,
    seeds: Annotated[str, typer.Option(help="seeds, e.g. 42-51 or 42,43")] = "42",
    mode: Annotated[
        Mode, typer.Option(help="fill: FGD paper protocol; timeline: arrivals and departures")
    ] = Mode.fill,
    out: Annotated[Path, typer.Option(help="output folder for summary.json, curves.csv, figures")] = Path(
        "out/sim"
    ),
    inflation: Annotated[
        float, typer.Option(help="fill: arrive pods up to this multiple of the cluster's GPUs")
    ] = 1.3,
    speedup: Annotated[
        float, typer.Option(help="timeline: divide arrival times by this (run times unchanged)")
    ] = 1.0,
    workers: Annotated[int, typer.Option(help="parallel processes (0: one per CPU core)")] = 0,
) -> None:
    """Replay a trace through the scheduling core and compare policies (FGD paper's figures)."""
    from shared.cli.simulate import parse_seeds
    from shared.cli.simulate import simulate as run

    chosen = [p.strip() for p in policy.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in POLICY_NAMES]
    if unknown or not chosen:
        raise typer.BadParameter(
            f"unknown policy {unknown}; choose from {', '.join(POLICY_NAMES)}", param_hint="--policy"
        )
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--seeds") from None
    if inflation < 1.0:
        raise typer.BadParameter("must be at least 1.0", param_hint="--inflation")
    try:
        run(nodes, pods, chosen, seed_list, mode.value, out, inflation, speedup, workers, console)
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
