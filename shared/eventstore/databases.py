"""Creating and dropping PostgreSQL databases beside a configured one.

``tessera up`` creates the configured database when the project's own server lacks it, the demo
replays into a fresh ``tessera_demo``, and tests and benchmarks each take a scratch database:
one way to do it, with the name quoted as PostgreSQL quotes an identifier.
"""

from __future__ import annotations

import urllib.parse

import asyncpg


def quoted(name: str) -> str:
    """``name`` as a quoted identifier (any character allowed; ``"`` doubled)."""
    return '"' + name.replace('"', '""') + '"'


def database_name(url: str) -> str:
    """The database a ``postgresql://`` URL names ("" when it names none)."""
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))


def beside(url: str, name: str) -> str:
    """The URL of database ``name`` on the server ``url`` points at (same user, host, options)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + urllib.parse.quote(name)))


async def create_database(url: str, name: str, *, replace: bool = False) -> str:
    """Create database ``name`` on ``url``'s server (connecting to ``url``'s own database to do
    it) and return its URL; ``replace`` drops one of that name first, with its connections."""
    admin = await asyncpg.connect(url)
    try:
        if replace:
            await admin.execute(f"DROP DATABASE IF EXISTS {quoted(name)} WITH (FORCE)")
        await admin.execute(f"CREATE DATABASE {quoted(name)}")
    finally:
        await admin.close()
    return beside(url, name)


async def drop_database(url: str, doomed: str) -> None:
    """Drop the database the URL ``doomed`` names, closing its connections, from ``url``'s server."""
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {quoted(database_name(doomed))} WITH (FORCE)")
    finally:
        await admin.close()
