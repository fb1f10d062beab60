"""How every service process starts: logging from the environment, SIGTERM/SIGINT stop it cleanly,
and garbage collection that does not pause the service for the whole heap (:class:`GcPolicy`).

``TESSERA_PROFILE=DIR`` (a developer aid) runs the service under cProfile and writes
``DIR/<TESSERA_SERVICE_NAME>.prof`` when it stops (``shared/settings.py``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable

from shared import metrics
from shared.bus.topics import ensure_topics
from shared.pause import pause
from shared.settings import Settings


class GcPolicy:
    """Full garbage collections that scan only what is new, and a log of long pauses.

    A service's heap grows with the cluster (a view of every job), and CPython's full collection
    walks all of it: measured during ``loadtests/bench_pipeline.py``, pauses of 100-430 ms in the
    agent and the placement worker, each one delaying every decision in flight.  Almost all of
    that heap is state that lives as long as the process, so after every full collection what
    survived is frozen (``gc.freeze``): the next ones scan only newer objects.  A frozen object
    that later dies inside a reference cycle would wait, so every ``sweep_s`` seconds everything is
    unfrozen and the next full collection looks at the whole heap again (one long pause per sweep,
    not one every few seconds).  Pauses of ``log_s`` or more are logged.
    """

    def __init__(self, sweep_s: float = 600.0, log_s: float = 0.02) -> None:
        self.sweep_s, self.log_s = sweep_s, log_s
        self._started = 0.0
        self._log = logging.getLogger("tessera.gc")

    def install(self) -> None:
        """Freeze what start-up made (modules, the libraries' state) and watch every collection."""
        gc.collect()
        gc.freeze()
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        if info["generation"] == 2:
            gc.freeze()  # what survived a full collection is long-lived state
        if took >= self.log_s:
            self._log.info("generation %d collection took %.0f ms", info["generation"], 1000 * took)

    async def sweep(self, stop: asyncio.Event) -> None:
        """Every ``sweep_s``: unfreeze, so the next full collection sees the whole heap."""
        while not await pause(stop, self.sweep_s):
            gc.unfreeze()


def run_service(body: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``body(stop)`` until it returns; ``stop`` is set on SIGTERM or SIGINT."""
    settings = Settings()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(message)s")
    gc_policy = GcPolicy(settings.gc_sweep_s)
    gc_policy.install()
    metrics.serve(settings)

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        sweeper = asyncio.create_task(gc_policy.sweep(stop))
        try:
            await body(stop)
        finally:
            stop.set()
            await sweeper

    if settings.profile is None:
        asyncio.run(go())
        return
    import cProfile

    name = settings.service_name or f"service-{os.getpid()}"
    settings.profile.mkdir(parents=True, exist_ok=True)
    with cProfile.Profile() as profiler:
        try:
            asyncio.run(go())
        finally:
            profiler.dump_stats(str(settings.profile / f"{name}.prof"))


async def service_topics(settings: Settings, wait_s: float | None = None) -> None:
    """The topics, waiting for Kafka up to ``wait_s``: by default ``TESSERA_START_WAIT_S`` (a
    service may start before the broker); a CLI command passes ``TESSERA_CLI_REACH_S``."""
    await ensure_topics(
        settings.kafka_bootstrap_servers,
        settings.topic_partitions,
        names=settings.topics,
        wait_s=settings.start_wait_s if wait_s is None else wait_s,
    )
