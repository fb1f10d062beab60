"""Tessera's asyncio services: thin shells around the pure core (see services/README.md)."""
