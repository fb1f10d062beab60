"""Ready markers: a service touches ``TESSERA_STATS_DIR/<name>.ready`` once it can do its work
(its consumer group has assigned it partitions, its nodes are registered), so ``tessera up`` and
the end-to-end tests start submitting only when every service listens."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from shared.settings import Settings


def folder() -> Path:
    return Settings().stats_dir


def mark_ready(name: str) -> None:
    path = folder()
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{name}.ready").write_text(str(os.getpid()))


def clear(names: Iterable[str]) -> None:
    where = folder()
    for name in names:
        (where / f"{name}.ready").unlink(missing_ok=True)


def wait_ready(names: Iterable[str], timeout: float = 60.0) -> list[str]:
    """Wait for every marker; returns the names still not ready after ``timeout``."""
    wanted, where = list(names), folder()  # the settings are read once, not every poll
    deadline = time.time() + timeout
    while True:
        missing = [n for n in wanted if not (where / f"{n}.ready").exists()]
        if not missing or time.time() > deadline:
            return missing
        time.sleep(0.2)
