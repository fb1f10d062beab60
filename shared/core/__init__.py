"""The pure, synchronous scheduling core.

Nothing in this package imports asyncio, aiokafka, asyncpg, reads the environment or the wall
clock, or draws random ids: every decision is a function of its inputs and of an injected seeded
``numpy.random.Generator``, so the simulator and the live services can never disagree.
"""

from shared.core.cluster import ClusterState, Placement
from shared.core.framework import Code, Decision, Profile, Status
from shared.core.task import MILLI, NodeSpec, TaskShape

__all__ = [
    "MILLI",
    "ClusterState",
    "Code",
    "Decision",
    "NodeSpec",
    "Placement",
    "Profile",
    "Status",
    "TaskShape",
]
