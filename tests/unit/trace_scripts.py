"""Loading the trace-variant scripts of ``loadtests/traces`` (the folder is not a package)."""

from __future__ import annotations

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
