"""How services collect garbage: survivors of a full collection are frozen until the next sweep."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from shared.pause import pause
from shared.service import GcPolicy


@pytest.fixture
def policy() -> Iterator[GcPolicy]:
    p = GcPolicy(sweep_s=0.05, log_s=0.0)
    p.install()
    try:
        yield p
    finally:
        gc.callbacks.remove(p._callback)
        gc.unfreeze()


def test_what_survives_a_full_collection_is_frozen(
    policy: GcPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    gc.unfreeze()
    survivors = [[i] for i in range(1000)]  # lists: always tracked by the collector
    with caplog.at_level("INFO", logger="tessera.gc"):
        gc.collect(2)
    assert gc.get_freeze_count() >= len(survivors)
    assert any("generation 2 collection took" in r.message for r in caplog.records)


async def test_a_sweep_unfreezes_so_the_next_full_collection_sees_everything(policy: GcPolicy) -> None:
    gc.collect(2)
    assert gc.get_freeze_count() > 0
    stop = asyncio.Event()
    sweeper = asyncio.create_task(policy.sweep(stop))
    await asyncio.sleep(0.12)
    assert gc.get_freeze_count() == 0
    stop.set()
    await sweeper


async def test_a_pause_ends_when_the_service_is_told_to_stop() -> None:
    stop = asyncio.Event()
    napping = asyncio.create_task(pause(stop, 3600))
    await asyncio.sleep(0)
    assert not napping.done()
    stop.set()
    assert await asyncio.wait_for(napping, 5) is True  # not an hour later


async def test_a_pause_without_a_stop_sleeps_its_length_and_says_so() -> None:
    assert await pause(asyncio.Event(), 0.01) is False
