"""The GPU-type-constrained variants: reproducible, of the stated share, feasible, and sane."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "loadtests" / "traces" / "make_gpuspec.py"
FOLDER = ROOT / "loadtests" / "traces" / "gpuspec"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_gpuspec", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_remakes_a_committed_variant_byte_for_byte(tmp_path: Path) -> None:
    m = _module()
    header, rows = m.make(
        m.OPENB / "openb_pod_list_default.csv", m.OPENB / "openb_node_list_gpu_node.csv", 0.2, 2, 8.0
    )
    out = tmp_path / "v.csv"
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    assert out.read_bytes() == (FOLDER / "openb_pod_list_gpuspec20-g2.csv").read_bytes()


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
