"""A commit Kafka refuses because the group moved on (a rebalance in a broker restart) is not an
error that may take a service down: the partitions' next owner gets the messages again."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.errors import CommitFailedError

from shared.bus.consumer import commit_or_yield


class _Consumer:
    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.committed: dict[TopicPartition, int] = {}

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if self.error is not None:
            raise self.error
        self.committed.update(offsets)


async def test_a_commit_after_a_rebalance_is_given_up_not_raised() -> None:
    tp = TopicPartition("t", 0)
    moved_on = _Consumer(CommitFailedError("the group has already rebalanced"))
    assert await commit_or_yield(moved_on, {tp: 7}) is False
    fine = _Consumer(None)
    assert await commit_or_yield(fine, {tp: 7}) is True and fine.committed == {tp: 7}
