"""Ready markers: a service touches ``TESSERA_STATS_DIR/<name>.ready`` once it can do its work
(its consumer group has assigned it partitions, its nodes are registered), so ``tessera up`` and
the end-to-end tests start submitting only when every service listens."""

from __future__ import annotations

import os
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


def not_ready(names: Iterable[str]) -> list[str]:
    """The names among ``names`` whose marker is not there (yet)."""
    where = folder()
    return [n for n in names if not (where / f"{n}.ready").exists()]
