"""The multi-GPU-heavy variants: reproducible, of the stated share, and resampled within classes."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from types import ModuleType

from shared.sim.trace import write_rows
from tests.unit.trace_scripts import TRACES, load_script

FOLDER = TRACES / "multigpu"
DEFAULT = TRACES / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"


def _module() -> ModuleType:
    return load_script("make_multigpu")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_script_remakes_a_committed_variant_byte_for_byte(tmp_path: Path) -> None:
    m = _module()
    header, rows = m.make(DEFAULT, 0.5, 2)
    write_rows(tmp_path / "v.csv", header, rows)
    assert (tmp_path / "v.csv").read_bytes() == (FOLDER / "openb_pod_list_multigpu50-g2.csv").read_bytes()


def test_each_variant_asks_its_share_of_gpu_from_multi_gpu_pods_drawn_from_the_default_trace() -> None:
    m = _module()
    base = _rows(DEFAULT)
    fields = [c for c in base[0] if c != "name"]
    known = {tuple(r[c] for c in fields) for r in base}
    cpu_only = Counter(r["name"] for r in base if int(r["num_gpu"]) == 0)
    variants = sorted(FOLDER.glob("*.csv"))
    assert len(variants) == 6
    for path in variants:
        pct = int(path.stem.split("multigpu")[1][:2])
        rows = _rows(path)
        assert [r["name"] for r in rows] == [r["name"] for r in base], path.name
        # CPU-only pods are kept; every GPU row is one of the default trace's rows.
        assert Counter(r["name"] for r in rows if int(r["num_gpu"]) == 0) == cpu_only
        assert all(tuple(r[c] for c in fields) in known for r in rows), path.name
        total = sum(m.gpu_milli(r) for r in rows)
        multi = sum(m.gpu_milli(r) for r in rows if int(r["num_gpu"]) > 1)
        assert abs(100 * multi / total - pct) < 4, (path.name, 100 * multi / total)
