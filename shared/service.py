"""How every service process starts: logging from the environment, SIGTERM/SIGINT stop it cleanly."""

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

    asyncio.run(go())
