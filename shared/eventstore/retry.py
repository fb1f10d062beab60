"""Riding out an unavailable store: retry a call until the store takes it.

A PostgreSQL restart or crash makes every call fail for a few seconds (the port's
``StoreUnavailableError``, an ``OSError``).  A service that holds work it has
accepted (a Kafka batch not yet committed, a task's end) must neither drop it nor exit: it
waits, with a capped exponential backoff, and tries the same call again.  Calls retried here
must be safe to repeat: appends carry expected versions, so one that was written before the
connection dropped conflicts instead of writing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

T = TypeVar("T")
log = logging.getLogger("tessera.store")


async def until_available(call: Callable[[], Awaitable[T]], what: str) -> T:
    """``await call()``, again and again while the store is unavailable (0.2 s, doubling, at
    most 5 s apart); any other error goes to the caller.  ``call`` should only talk to the store:
    every ``OSError`` it raises is taken for the store being away."""
    async for attempt in AsyncRetrying(
        # The port's StoreUnavailableError is an OSError; an adapter that lets a raw connection
        # error through is ridden out the same way.
        retry=retry_if_exception_type(OSError),
        wait=wait_exponential(multiplier=0.2, max=5.0),
        before_sleep=lambda state: log.warning(
            "%s: %s; retrying", what, state.outcome.exception() if state.outcome else ""
        ),
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: AsyncRetrying without a stop retries until success")
