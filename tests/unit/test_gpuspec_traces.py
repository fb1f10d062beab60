"""The GPU-type-constrained variants: reproducible, of the stated share, feasible, and sane."""

from __future__ import annotations

import csv
from pathlib import Path
from types import ModuleType

from shared.sim.trace import write_rows
from tests.unit.trace_scripts import TRACES, load_script

FOLDER = TRACES / "gpuspec"


def _module() -> ModuleType:
    return load_script("make_gpuspec")


def test_the_script_remakes_a_committed_variant_byte_for_byte(tmp_path: Path) -> None:
    m = _module()
    header, rows = m.make(
        m.OPENB / "openb_pod_list_default.csv", m.OPENB / "openb_node_list_gpu_node.csv", 0.2, 2, 8.0
    )
    write_rows(tmp_path / "v.csv", header, rows)
    assert (tmp_path / "v.csv").read_bytes() == (FOLDER / "openb_pod_list_gpuspec20-g2.csv").read_bytes()


def test_each_variant_constrains_its_share_of_gpu_pods_and_only_to_models_that_can_hold_them() -> None:
    m = _module()
    kinds = m.node_types(m.OPENB / "openb_node_list_gpu_node.csv")
    for path in sorted(FOLDER.glob("*.csv")):
        pct = int(path.stem.split("gpuspec")[1][:2])
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        gpu_rows = [r for r in rows if int(r["num_gpu"]) > 0]
        pinned = [r for r in gpu_rows if r["gpu_spec"]]
        assert abs(len(pinned) / len(gpu_rows) - pct / 100) < 0.01, path.name
        assert not [r for r in rows if r["gpu_spec"] and int(r["num_gpu"]) == 0]
        for r in pinned:
            need = (int(r["num_gpu"]), int(r["cpu_milli"]), int(r["memory_mib"]))
            assert all(m.holds(kinds[model], *need) for model in r["gpu_spec"].split("|")), r
