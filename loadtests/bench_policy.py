"""Placement decisions per second of each policy on the 1,523-node openb cluster, on one core.

Each policy runs the FGD fill protocol once (seed 42, default trace, every pod of the 130%
inflation) and the time spent inside ``decide()`` gives decisions/s; the wall time of a whole fill
run (decisions, bookkeeping and the per-pod fragmentation metric) is reported too.  BLAS threads
are pinned to one so the figure is a one-core figure.  Ends with one JSON line.

    .venv/bin/python loadtests/bench_policy.py [--policies fgd,tessera] [--nodes CSV] [--pods CSV]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from shared.core.registry import POLICY_NAMES  # noqa: E402
from shared.sim.fill import run_fill  # noqa: E402
from shared.sim.trace import load_nodes, load_pods  # noqa: E402

TRACES = Path(__file__).resolve().parent / "traces" / "alibaba-gpu-v2023"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=Path, default=TRACES / "openb_node_list_all_node.csv")
    parser.add_argument("--pods", type=Path, default=TRACES / "openb_pod_list_default.csv")
    parser.add_argument("--policies", default=",".join(POLICY_NAMES))
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    console = Console(width=120)
    table = Table(title=f"placement speed on {len(nodes)} nodes, {args.pods.stem}, one core")
    for column in ("policy", "decisions", "decisions/s", "µs/decision", "fill run (s)", "alloc@100 (%)"):
        table.add_column(column, justify="right" if column != "policy" else "left")
    figures: dict[str, float] = {}
    per_policy: dict[str, dict[str, float]] = {}
    with console.status("running fill protocols") as status:
        for policy in args.policies.split(","):
            status.update(f"running the fill protocol with {policy}")
            start = time.perf_counter()
            result = run_fill(nodes, pods, policy, args.seed)
            wall = time.perf_counter() - start
            rate = result.pods / result.decisions_s
            per_policy[policy] = {"decisions_per_s": round(rate), "fill_run_s": round(wall, 2)}
            table.add_row(
                policy,
                str(result.pods),
                f"{rate:,.0f}",
                f"{1e6 / rate:,.0f}",
                f"{wall:.2f}",
                f"{result.at('alloc', 100):.2f}",
            )
    console.print(table)
    for policy in ("fgd", "tessera"):
        if policy in per_policy:
            figures[f"{policy}_decisions_per_s"] = per_policy[policy]["decisions_per_s"]
    default = "tessera" if "tessera" in per_policy else next(iter(per_policy))
    figures["fill_run_s"] = per_policy[default]["fill_run_s"]
    print(json.dumps({**figures, "nodes": len(nodes), "policies": per_policy}))


if __name__ == "__main__":
    main()
