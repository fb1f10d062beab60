"""Markdown tables of ``tessera simulate`` and ``tessera bound`` results for the README.

    .venv/bin/python loadtests/report_tables.py docs/results

Reads ``DIR/<trace>/summary.json``, ``DIR/gpuspec/<trace>/summary.json`` and
``DIR/multigpu/<trace>/summary.json`` (as written by
``tessera simulate --out``), ``DIR/bounds/<trace>/bound.json`` (``tessera bound --out``), and the
FGD authors' cached curves in ``loadtests/traces/alibaba-gpu-v2023/fgd-expected-results``.
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
POINTS = ("90", "95", "100")


def paper_medians(column: str, filename: str) -> dict[tuple[str, str], float]:
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    with (EXPECTED / filename).open() as handle:
        for row in csv.DictReader(handle):
            policy = PAPER_NAMES[row["sc_policy"]]
            values[(row["workload"].removeprefix("openb_pod_list_"), policy)].append(float(row[column]))
    return {k: statistics.median(v) for k, v in values.items()}


def _summaries(root: Path) -> dict[str, dict[str, object]]:
    found = {}
    variants = sorted(root.glob("gpuspec/*/summary.json")) + sorted(root.glob("multigpu/*/summary.json"))
    for p in sorted(root.glob("*/summary.json")) + variants:
        body = json.loads(p.read_text())
        if body.get("mode") == "fill":
            found[p.parent.name] = body
    return found


def _bounds(root: Path) -> dict[str, dict[str, float]]:
    return {
        p.parent.name: json.loads(p.read_text())["bound"] for p in sorted(root.glob("bounds/*/bound.json"))
    }


def main(root: Path) -> None:
    paper = {x: paper_medians(x, "analysis_allo_discrete.csv") for x in POINTS}
    paper_frag = paper_medians("80", "analysis_frag_discrete.csv")
    summaries = _summaries(root)
    bounds = _bounds(root)
    default = summaries.get("default")
    if default:
        print("| policy | alloc @90 | @95 | @100 | @130 | paper @100 | frag @80 | paper frag @80 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, row in default["policies"].items():  # type: ignore[attr-defined]
            a = row["alloc"]
            ref = paper["100"].get(("default", name))
            ref_frag = paper_frag.get(("default", name))
            print(
                f"| {name} | {a['90']:.2f} | {a['95']:.2f} | {a['100']:.2f} | {a['130']:.2f} | "
                f"{f'{ref:.2f}' if ref else '—'} | {row['frag_amount_80']:.2f} | "
                f"{f'{ref_frag:.2f}' if ref_frag else '—'} |"
            )
        print()
    print(
        "| trace | FGD @90 / @95 / @100 | paper FGD @100 | Tessera @90 / @95 / @100 | gain @100 | "
        "bound @100 | FGD's gap to the bound closed |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for trace, summary in summaries.items():
        policies = summary["policies"]
        assert isinstance(policies, dict)
        if "fgd" not in policies or "tessera" not in policies:
            continue
        fgd, ours = policies["fgd"]["alloc"], policies["tessera"]["alloc"]
        ref = paper["100"].get((trace, "fgd"))
        bound = bounds.get(trace, {}).get("100")
        closed = "—"
        if bound is not None and bound > fgd["100"]:
            closed = f"{100 * (ours['100'] - fgd['100']) / (bound - fgd['100']):.0f}%"
        print(
            f"| {trace} | {' / '.join(f'{fgd[x]:.2f}' for x in POINTS)} | {f'{ref:.2f}' if ref else '—'} | "
            f"{' / '.join(f'{ours[x]:.2f}' for x in POINTS)} | {ours['100'] - fgd['100']:+.2f} | "
            f"{f'{bound:.2f}' if bound is not None else '—'} | {closed} |"
        )


def _h(v: object) -> str:
    if not isinstance(v, int | float):
        return "—"
    hours = float(v) / 3600
    return f"{hours:.1f}" if hours < 10 else f"{hours:.0f}"


def _spread(body: dict[str, object], policy: str, key: str) -> str:
    """The median, and the lowest and highest seed's figure where the summary has each seed's."""
    median = body["policies"][policy][key]  # type: ignore[index]
    runs = body.get("per_seed", {}).get(policy, {})  # type: ignore[attr-defined]
    values = sorted(float(run[key]) for run in runs.values())
    if len(values) < 2 or values[0] == values[-1]:
        return f"{median:.3f}"
    return f"{median:.3f} ({values[0]:.3f}-{values[-1]:.3f})"


def timeline_tables(root: Path) -> None:
    """One table per ``DIR/timeline/<trace>/summary.json``: hours, %, counts."""
    for p in sorted(root.glob("timeline/*/summary.json")):
        body = json.loads(p.read_text())
        print(
            f"\n{p.parent.name}: {body['nodes']} nodes / {body['gpus']} GPUs, {body['jobs']} jobs, "
            f"offered load {body['offered_load']}, seeds {body['seeds']}\n"
        )
        print(
            "| policy | avg JCT h | p95 wait h: 1 / 2-4 / 8 / >8 GPUs | Jain | GPU util % | "
            "idle while jobs wait % | work after window % | preemptions | max per job | GPU-h lost % |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, r in body["policies"].items():
            waits = " / ".join(_h(r["wait_p95_s"][c]) for c in ("1", "2-4", "8", ">8"))
            print(
                f"| {name} | {_h(r['avg_jct_s'])} | {waits} | "
                f"{_spread(body, name, 'jain')} | {r['utilisation']:.1f} | "
                f"{r.get('idle_while_waiting_pct', '—')} | "
                f"{r.get('work_after_window_pct', '—')} | {r['preemptions']} | "
                f"{r['max_preemptions_per_job']} | {r['gpu_hours_lost_pct']:.2f} |"
            )


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
    main(folder)
    timeline_tables(folder)
