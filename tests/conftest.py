"""Session fixtures: real servers for tests marked ``integration`` (see tests/servers.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from shared.eventstore import databases
from tests import servers


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with servers.kafka_bootstrap() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with servers.database_url() as url:
        yield url


async def create_database(database_url: str) -> str:
    """Create a new, empty database next to ``database_url`` and return its URL."""
    return await databases.create_database(database_url, f"t_{uuid.uuid4().hex[:12]}")


async def drop_database(database_url: str, url: str) -> None:
    await databases.drop_database(database_url, url)


@pytest.fixture
async def fresh_database(database_url: str) -> AsyncIterator[str]:
    """A new, empty database for one test (dropped afterwards)."""
    url = await create_database(database_url)
    yield url
    await drop_database(database_url, url)


@pytest.fixture
def unique() -> str:
    """A short unique suffix for topic and group names."""
    return uuid.uuid4().hex[:10]
