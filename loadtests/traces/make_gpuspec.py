"""Make GPU-type-constrained variants of the openb default trace (``gpu_spec`` on a share of GPU pods).

    .venv/bin/python loadtests/traces/make_gpuspec.py [--fractions 5,10,20,25,33] [--seeds 1,2,3]

Writes ``loadtests/traces/gpuspec/openb_pod_list_gpuspec<FF>-g<seed>.csv``: the default trace
row for row, with ``gpu_spec`` set on ``FF`` percent of its GPU pods (chosen uniformly, by the
seed) and every other column unchanged.  The same arguments always give the same bytes.

How a constrained pod's ``gpu_spec`` is chosen (the "mix"):

* The candidates are the cluster's GPU models on their own and the sets an operator of this
  cluster would write: ``V100M16|V100M32`` (the openb README's own example: either V100 memory
  size), ``G2|G3`` (the two 8-GPU server generations), ``T4|A10`` (the inference cards) and
  ``P100|V100M16|V100M32`` (any older training card).
* A candidate is only offered to a pod that some node of those models could hold when empty
  (enough GPUs, CPU and memory): production pods that can never run do not stay in a trace.
  A model with under 1% of the GPUs (the two A10s) is offered only inside a set.
* The weights are drawn per generator seed from a Dirichlet distribution (concentration
  ``--concentration``, 8 by default) centred half on each candidate's share of the cluster's GPUs
  and half on an equal share for every candidate.  Capacity alone would send three quarters of
  the constrained pods to ``G2`` or ``G2|G3``, which constrain almost nothing; users pin pods to a
  model for a reason (memory, an inference card, a driver), so the small pools get real demand:
  at 33% constrained, a few hundred pods each.  Each seed asks for the models in a different
  proportion (one leans on the V100s, another on the T4s), so policies are judged on several
  mixes, not on one that happens to suit them.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from shared.sim.trace import read_rows, write_rows

HERE = Path(__file__).resolve().parent
OPENB = HERE / "alibaba-gpu-v2023"
OUT = HERE / "gpuspec"
SETS: tuple[tuple[str, ...], ...] = (
    ("V100M16", "V100M32"),
    ("G2", "G3"),
    ("A10", "T4"),
    ("P100", "V100M16", "V100M32"),
)


def node_types(path: Path) -> dict[str, list[tuple[int, int, int]]]:
    """Per GPU model: the (GPUs, CPU milli, memory MiB) of each of its node kinds."""
    kinds: dict[str, set[tuple[int, int, int]]] = defaultdict(set)
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if int(row["gpu"]) > 0:
                kinds[row["model"]].add((int(row["gpu"]), int(row["cpu_milli"]), int(row["memory_mib"])))
    return {m: sorted(k) for m, k in kinds.items()}


def gpu_share(path: Path) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if int(row["gpu"]) > 0:
                total[row["model"]] += int(row["gpu"])
    return dict(total)


MIN_SINGLE_SHARE = 0.01
"""A model with less than this share of the cluster's GPUs is offered only inside a set: pods
pinned to the two A10 GPUs alone would fail for every policy and say nothing about any."""


def candidates(capacity: dict[str, int]) -> list[tuple[str, ...]]:
    total = sum(capacity.values())
    singles = [(m,) for m in sorted(capacity) if capacity[m] >= MIN_SINGLE_SHARE * total]
    return singles + [s for s in SETS if all(m in capacity for m in s)]


def holds(kinds: list[tuple[int, int, int]], num_gpu: int, cpu: int, mem: int) -> bool:
    return any(g >= num_gpu and c >= cpu and m >= mem for g, c, m in kinds)


def make(
    pods: Path, nodes: Path, fraction: float, seed: int, concentration: float
) -> tuple[list[str], list[dict[str, str]]]:
    kinds = node_types(nodes)
    capacity = gpu_share(nodes)
    offer = candidates(capacity)
    total = sum(capacity.values())
    by_capacity = np.array([sum(capacity[m] for m in c) / total for c in offer])
    centre = 0.5 * by_capacity / by_capacity.sum() + 0.5 / len(offer)
    rng = np.random.default_rng([seed, round(fraction * 1000)])
    weights = np.random.default_rng(seed).dirichlet(concentration * centre / centre.sum())
    header, rows = read_rows(pods)
    gpu_rows = [i for i, r in enumerate(rows) if int(r["num_gpu"]) > 0]
    chosen = rng.choice(len(gpu_rows), size=round(fraction * len(gpu_rows)), replace=False)
    for i in sorted(gpu_rows[int(k)] for k in chosen):
        row = rows[i]
        need = (int(row["num_gpu"]), int(row["cpu_milli"]), int(row["memory_mib"]))
        able = np.array([any(holds(kinds[m], *need) for m in c) for c in offer])
        if not able.any():
            continue  # no model at all could hold it: leave it unconstrained
        p = np.where(able, weights, 0.0)
        pick = offer[int(rng.choice(len(offer), p=p / p.sum()))]
        # Only the models that can hold the pod stay in a set (a set naming an impossible one is noise).
        row["gpu_spec"] = "|".join(m for m in pick if holds(kinds[m], *need))
    return header, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=Path, default=OPENB / "openb_pod_list_default.csv")
    parser.add_argument("--nodes", type=Path, default=OPENB / "openb_node_list_gpu_node.csv")
    parser.add_argument("--fractions", default="5,10,20,25,33", help="percent of GPU pods constrained")
    parser.add_argument("--seeds", default="1,2,3", help="generator seeds (each draws its own mix)")
    parser.add_argument("--concentration", type=float, default=8.0, help="Dirichlet concentration")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        for pct in (int(f) for f in args.fractions.split(",")):
            header, rows = make(args.pods, args.nodes, pct / 100, seed, args.concentration)
            path = args.out / f"openb_pod_list_gpuspec{pct:02d}-g{seed}.csv"
            write_rows(path, header, rows)
            specs = [r["gpu_spec"] for r in rows if r["gpu_spec"]]
            print(f"{path.name}: {len(specs)} constrained GPU pods, {len(set(specs))} distinct gpu_spec")


if __name__ == "__main__":
    main()
