"""Loading the trace-variant scripts of ``loadtests/traces`` and writing what they make, as they do."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from types import ModuleType

TRACES = Path(__file__).resolve().parents[2] / "loadtests" / "traces"


def load_script(name: str) -> ModuleType:
    """``loadtests/traces/<name>.py`` as a module (the folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, TRACES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def csv_bytes(header: list[str], rows: list[dict[str, str]], path: Path) -> bytes:
    """The bytes the scripts write for ``rows``."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path.read_bytes()
