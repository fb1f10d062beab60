"""Make multi-GPU-heavy variants of the openb default trace (more of its GPU asked by 2-8 GPU pods).

    .venv/bin/python loadtests/traces/make_multigpu.py [--fractions 20,50,80] [--seeds 1,2]

Writes ``loadtests/traces/multigpu/openb_pod_list_multigpu<FF>-g<seed>.csv``: as many rows as the
default trace, its CPU-only pods unchanged, and every GPU pod's row (all columns but ``name``)
redrawn from the default trace's GPU pods so that pods of 2 or more GPUs ask for ``FF`` percent of
the GPU, in expectation (7.3% in the default trace).  The same arguments always give the same
bytes.

How a GPU row is drawn: it is a multi-GPU pod with probability ``p = f s / (f s + (1 - f) m)``,
where ``f`` is the fraction, ``m`` the mean GPU of the default trace's multi-GPU pods and ``s``
that of its other GPU pods (whole and shared); the row is then one of that class's rows of the
default trace, uniformly.  So each class keeps the default trace's own mix (the 8-GPU pods with
64, 88 or 120 cores in their proportions; the shares of a GPU as they were), and only the
balance between the classes moves.  Alibaba's own ``openb_pod_list_gpushare*`` and ``cpu*``
variants were made from the default trace the same way (rows resampled within a class, the
names kept); its multi-GPU variants are not in this project, and these are not they: they were
made here, with this script, to see whether a policy's gains hold where large pods are common.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from shared.sim.trace import read_rows, write_rows

HERE = Path(__file__).resolve().parent
OPENB = HERE / "alibaba-gpu-v2023"
OUT = HERE / "multigpu"


def gpu_milli(row: dict[str, str]) -> int:
    return int(row["num_gpu"]) * int(row["gpu_milli"])


def make(pods: Path, fraction: float, seed: int) -> tuple[list[str], list[dict[str, str]]]:
    header, rows = read_rows(pods)
    multi = [r for r in rows if int(r["num_gpu"]) > 1]
    single = [r for r in rows if int(r["num_gpu"]) == 1]
    m = float(np.mean([gpu_milli(r) for r in multi]))
    s = float(np.mean([gpu_milli(r) for r in single]))
    p = fraction * s / (fraction * s + (1.0 - fraction) * m)
    rng = np.random.default_rng([seed, round(fraction * 1000)])
    out: list[dict[str, str]] = []
    for row in rows:
        if int(row["num_gpu"]) == 0:
            out.append(row)
            continue
        pool = multi if rng.random() < p else single
        drawn = dict(pool[int(rng.integers(len(pool)))])
        drawn["name"] = row["name"]
        out.append(drawn)
    return header, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=Path, default=OPENB / "openb_pod_list_default.csv")
    parser.add_argument("--fractions", default="20,50,80", help="percent of the GPU asked by multi-GPU pods")
    parser.add_argument("--seeds", default="1,2", help="generator seeds")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in (int(s) for s in args.seeds.split(",")):
        for pct in (int(f) for f in args.fractions.split(",")):
            header, rows = make(args.pods, pct / 100, seed)
            path = args.out / f"openb_pod_list_multigpu{pct:02d}-g{seed}.csv"
            write_rows(path, header, rows)
            total = sum(gpu_milli(r) for r in rows)
            big = sum(gpu_milli(r) for r in rows if int(r["num_gpu"]) > 1)
            count = sum(1 for r in rows if int(r["num_gpu"]) > 1)
            print(f"{path.name}: {count} multi-GPU pods, {100 * big / total:.1f}% of the GPU asked")


if __name__ == "__main__":
    main()
