"""``tessera up`` creates the database ``DATABASE_URL`` names when the project's own (loopback)
server answers without it; elsewhere it leaves a missing database to be reported."""

from __future__ import annotations

from urllib.parse import urlsplit

import asyncpg
import pytest

from shared.cli.stack import LOOPBACK, ensure_database
from shared.eventstore.databases import drop_database


async def test_a_missing_database_is_created_on_a_loopback_server_and_left_alone_after(
    database_url: str, unique: str
) -> None:
    base, _, _ = database_url.rpartition("/")
    name = f"t_up_{unique}"
    url = f"{base}/{name}"
    if urlsplit(url).hostname not in LOOPBACK:  # a container's server elsewhere: not created
        with pytest.raises(asyncpg.InvalidCatalogNameError):
            await ensure_database(url)
        return
    try:
        assert await ensure_database(url) == name
        assert await ensure_database(url) is None  # there now
        conn = await asyncpg.connect(url)
        await conn.close()
    finally:
        await drop_database(database_url, url)
