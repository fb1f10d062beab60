"""Markdown tables of ``tessera simulate`` results next to the FGD authors' own figures.

    .venv/bin/python loadtests/report_tables.py docs/results

Reads ``DIR/<trace>/summary.json`` (as written by ``tessera simulate --out DIR/<trace>``) and the
authors' cached curves in ``loadtests/traces/alibaba-gpu-v2023/fgd-expected-results``.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

EXPECTED = Path(__file__).resolve().parent / "traces" / "alibaba-gpu-v2023" / "fgd-expected-results"
PAPER_NAMES = {
    "01-Random": "random",
    "02-DotProd": "dotprod",
    "03-GpuClustering": "gpuclustering",
    "04-GpuPacking": "gpupacking",
    "05-BestFit": "bestfit",
    "06-FGD": "fgd",
}


def paper_medians(column: str, filename: str) -> dict[tuple[str, str], float]:
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    with (EXPECTED / filename).open() as handle:
        for row in csv.DictReader(handle):
            policy = PAPER_NAMES[row["sc_policy"]]
            values[(row["workload"].removeprefix("openb_pod_list_"), policy)].append(float(row[column]))
    return {k: statistics.median(v) for k, v in values.items()}


def main(root: Path) -> None:
    paper = paper_medians("100", "analysis_allo_discrete.csv")
    paper_frag = paper_medians("80", "analysis_frag_discrete.csv")
    summaries = {p.parent.name: json.loads(p.read_text()) for p in sorted(root.glob("*/summary.json"))}
    default = summaries.get("default")
    if default:
        print("| policy | alloc @90 | @95 | @100 | @130 | paper @100 | frag @80 | paper frag @80 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, row in default["policies"].items():
            a = row["alloc"]
            ref = paper.get(("default", name))
            ref_frag = paper_frag.get(("default", name))
            print(
                f"| {name} | {a['90']:.2f} | {a['95']:.2f} | {a['100']:.2f} | {a['130']:.2f} | "
                f"{f'{ref:.2f}' if ref else '—'} | {row['frag_amount_80']:.2f} | "
                f"{f'{ref_frag:.2f}' if ref_frag else '—'} |"
            )
        print()
    print("| trace | FGD @100 | Tessera @100 | gain (points) | unallocated GPUs cut | paper FGD @100 |")
    print("|---|---:|---:|---:|---:|---:|")
    for trace, summary in summaries.items():
        policies = summary["policies"]
        if "fgd" not in policies or "tessera" not in policies:
            continue
        fgd, ours = policies["fgd"]["alloc"]["100"], policies["tessera"]["alloc"]["100"]
        cut = 100 * ((100 - fgd) - (100 - ours)) / (100 - fgd)
        ref = paper.get((trace, "fgd"))
        print(
            f"| {trace} | {fgd:.2f} | {ours:.2f} | {ours - fgd:+.2f} | {cut:.1f}% | "
            f"{f'{ref:.2f}' if ref else '—'} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results"))
