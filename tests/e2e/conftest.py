"""The end-to-end tests' stack: every service a process of its own, on a database and topic
prefix of the test's own, stopped, its topics deleted and its database dropped afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loadtests.live_stack import LiveStack
from tests.conftest import create_database, drop_database


@pytest.fixture
async def live(
    kafka_bootstrap: str, database_url: str, unique: str, tmp_path: Path
) -> AsyncIterator[LiveStack]:
    database = await create_database(database_url)
    s = LiveStack(kafka_bootstrap, database, f"e2e{unique}", tmp_path)
    try:
        yield s
    finally:
        await s.stop()
        await s.delete_topics()
        await drop_database(database_url, database)
