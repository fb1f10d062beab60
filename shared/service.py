"""How every service process starts: logging from the environment, SIGTERM/SIGINT stop it cleanly.

``TESSERA_PROFILE=DIR`` (a developer aid) runs the service under cProfile and writes
``DIR/<TESSERA_SERVICE_NAME>.prof`` when it stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable


def run_service(body: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``body(stop)`` until it returns; ``stop`` is set on SIGTERM or SIGINT."""
    logging.basicConfig(
        level=os.environ.get("TESSERA_LOG_LEVEL", "INFO"), format="%(asctime)s %(name)s %(message)s"
    )

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await body(stop)

    profile_dir = os.environ.get("TESSERA_PROFILE")
    if not profile_dir:
        asyncio.run(go())
        return
    import cProfile
    from pathlib import Path

    name = os.environ.get("TESSERA_SERVICE_NAME", f"service-{os.getpid()}")
    Path(profile_dir).mkdir(parents=True, exist_ok=True)
    with cProfile.Profile() as profiler:
        try:
            asyncio.run(go())
        finally:
            profiler.dump_stats(str(Path(profile_dir) / f"{name}.prof"))
