"""The placement worker's work items: an offset is committed only past jobs that left 'pending'."""

from __future__ import annotations

from datetime import UTC, datetime

from aiokafka import TopicPartition

from schemas import JobSpec
from schemas.events import JobAdmitted, JobCancelled
from services.placement.app import WorkItems
from shared.eventstore.port import RecordedEvent
from shared.state.fold import ClusterView
from shared.state.follow import same_log

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TP = TopicPartition("tessera.placement", 0)


def admitted(position: int, job: str) -> RecordedEvent:
    spec = JobSpec.model_validate({"id": job, "tenant": "t", "resources": {"cpu": "1"}})
    data = JobAdmitted(spec=spec).model_dump(mode="json", by_alias=True)
    return RecordedEvent(position, f"job-{job}", 1, "JobAdmitted", data, {}, NOW)


def cancelled(position: int, job: str) -> RecordedEvent:
    data = JobCancelled(job_id=job).model_dump(mode="json", by_alias=True)
    return RecordedEvent(position, f"job-{job}", 2, "JobCancelled", data, {}, NOW)


def test_items_are_done_only_once_their_job_is_known_and_no_longer_pending() -> None:
    view = ClusterView()
    work = WorkItems()
    for offset, job in enumerate(["a", "b", "c"]):
        work.add(TP, offset, job)
    # The work items arrived before any JobAdmitted was folded: nothing is done yet.
    assert work.done_offsets(view) == {}
    view.apply_all([admitted(1, "a"), admitted(2, "b"), cancelled(3, "a")])
    assert work.done_offsets(view) == {TP: 1}  # a left pending; b waits, c is not even known
    view.apply_all([cancelled(4, "b"), admitted(5, "c")])
    assert work.done_offsets(view) == {TP: 2}
    assert work.owned() == {"c"}


def test_an_item_whose_job_the_log_does_not_hold_is_done_once_the_view_is_past_it() -> None:
    view = ClusterView()
    work = WorkItems()
    work.add(TP, 0, "foreign", position=2)  # left on a reused topic by another database
    work.add(TP, 1, "b", position=3)
    view.apply_all([admitted(1, "a")])
    assert work.done_offsets(view) == {}  # position 2 not yet folded: it may still come
    view.apply_all([admitted(3, "b"), cancelled(4, "b")])
    assert work.done_offsets(view) == {TP: 2}  # past 2 and no such job: done; b left pending


def test_messages_count_as_this_logs_only_with_its_stamp() -> None:
    assert same_log({"log": b"a1"}, "a1")
    assert not same_log({"log": b"b2"}, "a1")
    assert not same_log({}, "a1")  # published before logs had identities
    assert same_log({"log": b"b2"}, "") and same_log({}, "")  # a follower that knows no log takes all
