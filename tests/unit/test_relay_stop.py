"""The relay ends when told to, even while PostgreSQL is away (it retries until then)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from loadtests.live_stack import free_port  # nothing listens there: connecting is refused at once
from shared.eventstore.relay import Relay


async def test_stop_ends_the_relay_during_an_outage() -> None:
    store: Any = SimpleNamespace(dsn=f"postgresql://tessera@127.0.0.1:{free_port()}/tessera")
    relay = Relay(store, producer=SimpleNamespace())  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    await asyncio.sleep(1.0)  # several refused connections; the relay is between two tries
    assert not task.done(), "the relay gave up while the store was away"
    stop.set()
    await asyncio.wait_for(task, 2.0)  # ends cleanly, without another try or an error
    assert relay.published == 0
