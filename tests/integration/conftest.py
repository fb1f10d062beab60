"""Integration tests name their topics after the test's ``unique`` suffix; they are deleted
afterwards, so the broker does not pile up partitions from old runs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.bus.topics import delete_topics


@pytest.fixture(autouse=True)
async def _delete_the_tests_topics(kafka_bootstrap: str, unique: str) -> AsyncIterator[None]:
    yield
    await delete_topics(kafka_bootstrap, lambda name: name.endswith(unique))
