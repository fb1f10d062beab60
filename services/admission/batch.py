"""Deciding a poll batch of commands against the event store, in as few round trips as possible.

Admission keeps no copy of the cluster's jobs: per batch it reads the admitted specs of just
the submitted ids (one query), and it follows only ``NodeRegistered`` events for its
"impossible" check.  Folding the whole log (every placement and task start) to answer "does this
id exist" cost more than every other admission step together.

Submissions are decided and appended as one transaction, expecting each new job stream not to
exist; a conflict (another admission instance admitted one of the ids first, or a redelivery
raced) re-reads and decides again, so the outcome is what deciding the messages one at a time
would give.  A ``CancelJob`` splits the batch: what came before it is appended first, so a cancel
sees a job submitted earlier in the same batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from schemas.commands import ApplyQueues, CancelJob, DrainNode, SubmitJob, UncordonNode
from schemas.events import CommandRejected, NodeCordoned, NodeUncordoned, QueuesApplied
from schemas.job import JobSpec
from services.admission.handlers import NeverFits, QueuePolicy, QueueRights, admit, cancel
from shared.core.queues import QueueTree
from shared.eventstore import ANY_VERSION, ConcurrencyError, EventStore, NewEvent
from shared.eventstore.retry import until_available
from shared.state.fold import ClusterView, job_state
from shared.state.wire import QUEUES_STREAM, job_stream, node_stream, queue_tree

QUEUES_REJECTED = "rejected-apply-queues"  # trees the core refused, each a CommandRejected

log = logging.getLogger("tessera.admission")
ATTEMPTS = 20
"""Appends tried per decision when another writer keeps moving the same streams; each conflict
re-reads and decides again.  Past this the commands are answered ``conflict`` and the shell
dead-letters them with that reason (never committed as if they had been handled)."""


class NodeInventories:
    """The registered nodes and the applied queue tree, followed from the store through
    ``NodeRegistered`` and ``QueuesApplied`` events only."""

    def __init__(self) -> None:
        self.view = ClusterView()  # fed registrations and trees only: ``cluster`` and ``queues``
        self.position = 0  # every event up to here has been looked at
        self._tree: tuple[object, QueueTree] | None = None

    async def refresh(self, store: EventStore) -> None:
        head = await store.last_position()  # read first: every registration at or below it is visible
        while events := await store.read_all(self.position, 2000, types=("NodeRegistered", "QueuesApplied")):
            self.view.apply_all(events)
            self.position = events[-1].position
        self.position = max(self.position, head)

    def tree(self) -> QueueTree | None:
        spec = self.view.queues
        if spec is None:
            return None
        if self._tree is None or self._tree[0] is not spec:
            self._tree = (spec, queue_tree(spec))
        return self._tree[1]


class Admission:
    def __init__(self, store: EventStore, queues: QueueRights) -> None:
        self.store = store
        self.queues = queues
        self.nodes = NodeInventories()
        self.never_fits = NeverFits()

    async def decide_riding_out(self, commands: Sequence[object], stop: asyncio.Event) -> list[str] | None:
        """:meth:`decide`, tried again while the store is away (``until_available``); None if
        ``stop`` ends the wait first.  Nothing of the batch is then written, so the caller must
        leave its offsets uncommitted: the consumer group's next member gets it again."""
        try:
            return await until_available(lambda: self.decide(commands), "admitting a batch", stop=stop)
        except OSError:  # until_available gives up on the store only once ``stop`` is set
            log.warning("stopping with a batch of %d not admitted (it will come again)", len(commands))
            return None

    async def decide(self, commands: Sequence[object]) -> list[str]:
        """Decide and append every command of one poll batch; one verdict per command, in order."""
        await self.nodes.refresh(self.store)
        verdicts: list[str] = []
        submissions: list[SubmitJob] = []
        for command in commands:
            if isinstance(command, SubmitJob):
                submissions.append(command)
                continue
            verdicts += await self._submit(submissions)
            submissions = []
            if isinstance(command, CancelJob):
                verdicts.append(await self._cancel(command))
            elif isinstance(command, ApplyQueues):
                verdicts.append(await self._apply_queues(command))
            elif isinstance(command, DrainNode | UncordonNode):
                verdicts.append(await self._cordon(command))
            else:
                verdicts.append("ignored")
        verdicts += await self._submit(submissions)
        return verdicts

    async def _submit(self, commands: list[SubmitJob]) -> list[str]:
        if not commands:
            return []
        policy = QueuePolicy(self.queues, self.nodes.tree())
        for attempt in range(ATTEMPTS):
            found = await self.store.read_streams({job_stream(c.spec.id) for c in commands}, up_to_version=1)
            admitted = {
                stream.removeprefix("job-"): JobSpec.model_validate(events[0].data["spec"])
                for stream, events in found.items()
                if events[0].type == "JobAdmitted"
            }
            events: list[NewEvent] = []
            expected: dict[str, int] = {}
            verdicts: list[str] = []
            for command in commands:
                spec = command.spec
                outcome = admit(self.nodes.view.cluster, policy, spec, admitted.get(spec.id), self.never_fits)
                if outcome.verdict == "admitted":
                    admitted[spec.id] = spec  # a twin later in the same batch is a duplicate of this
                events += outcome.events
                expected.update(outcome.expected)
                verdicts.append(outcome.verdict)
            try:
                if events:
                    await self.store.append(events, expected)
                return verdicts
            except ConcurrencyError:
                await asyncio.sleep(0.01 * attempt)  # another writer created one first: look again
        log.warning("gave up on %d submissions after %d conflicting appends", len(commands), ATTEMPTS)
        return ["conflict"] * len(commands)

    async def _cordon(self, command: DrainNode | UncordonNode) -> str:
        """``tessera drain`` / ``uncordon``: a fact on the node's stream; the preemption service
        evicts a drained node's jobs, every placement worker stops using it."""
        node = command.node
        if node not in self.nodes.view.inventories:
            kind = "drain" if isinstance(command, DrainNode) else "uncordon"
            event = CommandRejected(
                command=command.type, target=node, reason=f"cannot {kind} {node!r}: no such node registered"
            )
            stream = f"rejected-{kind}-{node}"
            await self.store.append(
                [NewEvent(stream, event.type, event.model_dump(mode="json"))], {stream: ANY_VERSION}
            )
            return "rejected"
        fact: NodeCordoned | NodeUncordoned
        if isinstance(command, DrainNode):
            fact = NodeCordoned(node=node, drain=True, reason=command.reason)
        else:
            fact = NodeUncordoned(node=node)
        stream = node_stream(node)
        await self.store.append(
            [NewEvent(stream, fact.type, fact.model_dump(mode="json"))], {stream: ANY_VERSION}
        )
        return "drained" if isinstance(command, DrainNode) else "uncordoned"

    async def _apply_queues(self, command: ApplyQueues) -> str:
        """The whole tree replaces the last one; the cycle and admission read it from the log."""
        try:
            queue_tree(command.tree)  # the core's own checks (parents, guarantees within max)
        except ValueError as exc:
            # `tessera queue apply` runs the same checks first; a tree produced straight to the
            # topic gets its answer in the log, as a refused drain does.
            log.warning("queue tree refused: %s", exc)
            refused = CommandRejected(
                command=command.type, target="queues", reason=f"queue tree refused: {exc}"
            )
            await self.store.append(
                [NewEvent(QUEUES_REJECTED, refused.type, refused.model_dump(mode="json"))],
                {QUEUES_REJECTED: ANY_VERSION},
            )
            return "rejected"
        event = QueuesApplied(tree=command.tree)
        await self.store.append(
            [NewEvent(QUEUES_STREAM, event.type, event.model_dump(mode="json", by_alias=True))],
            {QUEUES_STREAM: ANY_VERSION},
        )
        await self.nodes.refresh(self.store)
        return "queues-applied"

    async def _cancel(self, command: CancelJob) -> str:
        stream = job_stream(command.job_id)
        for _ in range(ATTEMPTS):
            found = await self.store.read_streams([stream])
            events = found.get(stream, [])
            asked = any(e.type == "CancelRequested" for e in events)
            outcome = cancel(job_state(events), command.job_id, command.reason, asked)
            try:
                if outcome.events:
                    await self.store.append(outcome.events, outcome.expected)
                return outcome.verdict
            except ConcurrencyError:
                continue  # the job moved (placed, started, ended) while deciding: decide again
        return "conflict"
