"""Run independent jobs (simulations, bounds) in worker processes with one progress bar."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

J = TypeVar("J")
R = TypeVar("R")


def run_all(fn: Callable[[J], R], jobs: Sequence[J], workers: int, console: Console, what: str) -> list[R]:
    """``fn`` over ``jobs``, results in job order; ``workers`` processes (0: one per core), in
    this process when one is enough."""
    workers = max(1, min(workers or (os.cpu_count() or 1), len(jobs)))
    results: list[R] = []
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(f"{what} ({workers} worker(s))", total=len(jobs))
        if workers == 1:
            for job in jobs:
                results.append(fn(job))
                progress.advance(task)
        else:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                for result in pool.map(fn, jobs):
                    results.append(result)
                    progress.advance(task)
    return results
