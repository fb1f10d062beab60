"""Riding out an unavailable store: retry a call until the store takes it.

A PostgreSQL restart or crash makes every call fail for a few seconds (the port's
``StoreUnavailableError``, an ``OSError``).  A service that holds work it has
accepted (a Kafka batch not yet committed, a task's end) must neither drop it nor exit: it
waits, with a capped exponential backoff, and tries the same call again.  Calls retried here
must be safe to repeat: appends carry expected versions, so one that was written before the
connection dropped conflicts instead of writing twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from shared import metrics
from shared.pause import pause as stop_pause

T = TypeVar("T")
log = logging.getLogger("tessera.store")


def _retrying(what: str, state: RetryCallState) -> None:
    metrics.STORE_RETRIES.inc()
    log.warning("%s: %s; retrying", what, state.outcome.exception() if state.outcome else "")


async def until_available(
    call: Callable[[], Awaitable[T]],
    what: str,
    stop: asyncio.Event | None = None,
    errors: type[BaseException] | tuple[type[BaseException], ...] = OSError,
    within_s: float | None = None,
) -> T:
    """``await call()``, again and again while the store is unavailable (0.2 s, doubling, at
    most 5 s apart); any other error goes to the caller.

    ``errors`` are what count as the store being away: by default every ``OSError`` (the port's
    ``StoreUnavailableError`` is one), so ``call`` should then only talk to the store; a call
    that also does other I/O names ``StoreUnavailableError`` alone.  With ``stop``, a wait ends
    as soon as it is set and the last error goes to the caller: a service shutting down while
    the store is away does not sit out the backoff.  With ``within_s``, the last error goes to
    the caller once that long has passed (a service starting before its database waits that
    long, not for ever: a wrong address should end in an error)."""

    async def pause(seconds: float) -> None:
        if stop is None:
            await asyncio.sleep(seconds)
            return
        await stop_pause(stop, seconds)

    def stopping(state: RetryCallState) -> bool:
        if stop is not None and stop.is_set():
            return True
        return within_s is not None and (state.seconds_since_start or 0.0) >= within_s

    async for attempt in AsyncRetrying(
        # An adapter that lets a raw connection error through is ridden out the same way.
        retry=retry_if_exception_type(errors),
        wait=wait_exponential(multiplier=0.2, max=5.0),
        stop=stopping,
        sleep=pause,
        before_sleep=lambda state: _retrying(what, state),
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: AsyncRetrying returns the call's value or raises")
