"""Reading the Alibaba openb node and pod lists (and any CSV of the same columns).

Node list columns: ``sn, cpu_milli, memory_mib, gpu, model``.  Pod list columns: ``name,
cpu_milli, memory_mib, num_gpu, gpu_milli`` and optionally ``gpu_spec, qos, pod_phase,
creation_time, deletion_time, scheduled_time``; missing optional columns take defaults.
``gpu_spec`` lists accepted GPU models separated by ``|`` (empty: any).  A malformed row raises
:class:`TraceError` naming the file and line.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from shared.core.task import MILLI, NodeSpec, TaskShape

POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
NODE_REQUIRED = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


class TraceError(ValueError):
    """A trace file that cannot be read, with the file and 1-based line number."""

    def __init__(self, path: Path, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}")
        self.path, self.line = path, line


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    shape: TaskShape
    qos: str = ""
    creation_time: float = 0.0
    deletion_time: float | None = None


def _int(row: dict[str, str], key: str, path: Path, line: int) -> int:
    raw = (row.get(key) or "").strip()
    try:
        value = int(float(raw))
    except ValueError:
        raise TraceError(path, line, f"column {key!r}: {raw!r} is not a number") from None
    if value < 0:
        raise TraceError(path, line, f"column {key!r}: {value} is negative")
    return value


def _float(row: dict[str, str], key: str, default: float | None, path: Path, line: int) -> float | None:
    raw = (row.get(key) or "").strip()
    if not raw or raw.lower() == "nan":
        return default
    try:
        return float(raw)
    except ValueError:
        raise TraceError(path, line, f"column {key!r}: {raw!r} is not a number") from None


def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise TraceError(path, 0, f"cannot open: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(path, 1, f"missing column(s) {', '.join(missing)}; header is {header}")
        return [(reader.line_num, row) for row in reader]


def load_nodes(path: Path) -> list[NodeSpec]:
    nodes: list[NodeSpec] = []
    for line, row in _rows(path, NODE_REQUIRED):
        gpus = _int(row, "gpu", path, line)
        model = (row.get("model") or "").strip()
        if model.lower() == "nan":
            model = ""
        if gpus > 0 and not model:
            raise TraceError(path, line, f"node with {gpus} GPUs has no model")
        nodes.append(
            NodeSpec(
                name=row["sn"].strip(),
                cpu_milli=_int(row, "cpu_milli", path, line),
                memory_mib=_int(row, "memory_mib", path, line),
                gpu_count=gpus,
                gpu_model=model if gpus > 0 else "",
            )
        )
    if not nodes:
        raise TraceError(path, 1, "no nodes")
    return nodes


def load_pods(path: Path) -> list[TracePod]:
    pods: list[TracePod] = []
    for line, row in _rows(path, POD_REQUIRED):
        num_gpu = _int(row, "num_gpu", path, line)
        gpu_milli = _int(row, "gpu_milli", path, line)
        if num_gpu == 0:
            gpu_milli = 0
        if num_gpu > 0 and gpu_milli == 0:
            raise TraceError(path, line, f"num_gpu={num_gpu} with gpu_milli=0")
        spec = (row.get("gpu_spec") or "").strip()
        models = tuple(sorted(m for m in spec.split("|") if m and m.lower() != "nan"))
        try:
            shape = TaskShape(
                cpu_milli=_int(row, "cpu_milli", path, line),
                memory_mib=_int(row, "memory_mib", path, line),
                num_gpu=num_gpu,
                gpu_milli=min(gpu_milli, MILLI) if num_gpu > 1 else gpu_milli,
                gpu_models=models,
            )
        except ValueError as exc:
            raise TraceError(path, line, str(exc)) from None
        creation = _float(row, "creation_time", 0.0, path, line)
        deletion = _float(row, "deletion_time", None, path, line)
        pods.append(
            TracePod(
                name=row["name"].strip(),
                shape=shape,
                qos=(row.get("qos") or "").strip(),
                creation_time=creation or 0.0,
                deletion_time=deletion,
            )
        )
    if not pods:
        raise TraceError(path, 1, "no pods")
    return pods


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """A trace CSV's header and rows as they are (the variant generators rewrite them)."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def write_rows(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    """Rows as a CSV in the trace's own layout, byte for byte as the committed variants."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
