"""The exactly-once checks the end-to-end tests and ``loadtests/chaos.py`` apply to a log, and the
trace jobs the crash tests submit."""

from __future__ import annotations

from datetime import UTC, datetime

from loadtests.live_stack import delivery_faults, trace_specs
from shared.eventstore.port import RecordedEvent


def _log(*entries: tuple[str, str]) -> list[RecordedEvent]:
    at = datetime.now(UTC)
    return [RecordedEvent(n + 1, stream, 1, kind, {}, {}, at) for n, (stream, kind) in enumerate(entries)]


def test_a_sound_log_has_no_faults() -> None:
    log = _log(
        ("job-a", "JobAdmitted"),
        ("job-a", "JobPlaced"),
        ("task-a-0-0", "JobStarted"),
        ("task-a-0-0", "JobFinished"),
    )
    faults = delivery_faults(log, ["a"])
    assert faults == {
        "admitted_not_once": 0,
        "placed_not_once": 0,
        "tasks_started_twice": 0,
        "tasks_ended_twice": 0,
        "tasks_never_ended": 0,
        "tasks_ended_unstarted": 0,
        "tasks_started": 1,
    }


def test_each_kind_of_fault_is_counted() -> None:
    log = _log(
        ("job-a", "JobAdmitted"),
        ("job-a", "JobAdmitted"),  # admitted twice
        ("job-a", "JobPlaced"),
        ("job-a", "JobPlaced"),  # placed twice
        ("task-a-0-0", "JobStarted"),
        ("task-a-0-0", "JobStarted"),  # started twice
        ("task-a-0-0", "JobFinished"),
        ("task-a-0-0", "JobFailed"),  # ended twice
        ("task-a-1-0", "JobStarted"),  # never ended
        ("task-a-2-0", "JobFinished"),  # ended, never started
    )
    faults = delivery_faults(log, ["a", "b"])  # b: never admitted nor placed
    assert faults["admitted_not_once"] == 2 and faults["placed_not_once"] == 2
    assert faults["tasks_started_twice"] == 1 and faults["tasks_ended_twice"] == 1
    assert faults["tasks_never_ended"] == 1 and faults["tasks_ended_unstarted"] == 1


def test_a_stopped_task_has_ended_and_a_job_cancelled_while_waiting_need_not_be_placed() -> None:
    log = _log(
        ("job-a", "JobAdmitted"),
        ("job-a", "JobPlaced"),
        ("task-a-0-0", "JobStarted"),
        ("task-a-0-0", "TaskStopped"),  # cancelled (or evicted) while it ran: its end
        ("job-a", "JobCancelled"),
        ("job-b", "JobAdmitted"),
        ("job-b", "JobCancelled"),  # cancelled while it waited: never placed
    )
    faults = delivery_faults(log, ["a", "b"], may_be_unplaced={"a", "b"})
    assert faults["placed_not_once"] == 0 and faults["tasks_never_ended"] == 0
    assert delivery_faults(log, ["a", "b"])["placed_not_once"] == 1  # b, unless it may be unplaced


def test_trace_specs_cap_run_times_and_keep_the_rest() -> None:
    whole = trace_specs(300, speedup=500, tag="a")
    capped = trace_specs(300, speedup=500, tag="a", longest_s=5000)
    assert [s.id for s in capped] == [s.id for s in whole]
    assert max(s.duration_s or 0 for s in whole) > 5000  # the trace's tail the cap is for
    assert max(s.duration_s or 0 for s in capped) == 5000
    for full, cut in zip(whole, capped, strict=True):
        assert cut.duration_s == min(full.duration_s or 0, 5000)
        assert cut.model_copy(update={"duration_s": full.duration_s}) == full


def test_per_attempt_a_job_placed_again_after_an_eviction_is_sound_and_twice_in_one_attempt_is_not() -> None:
    at = datetime.now(UTC)
    entries = [
        ("job-a", "JobAdmitted", {}),
        ("job-a", "JobPlaced", {"attempt": 0}),
        ("job-a", "JobPlaced", {"attempt": 1}),  # evicted, placed again in its next attempt
        ("job-b", "JobAdmitted", {}),
        ("job-b", "JobPlaced", {"attempt": 0}),
        ("job-b", "JobPlaced", {"attempt": 0}),  # twice in one attempt
        ("job-c", "JobAdmitted", {}),  # never placed
    ]
    log = [RecordedEvent(n + 1, s, 1, kind, data, {}, at) for n, (s, kind, data) in enumerate(entries)]
    assert delivery_faults(log, ["a", "b", "c"], per_attempt=True)["placed_not_once"] == 2  # b and c
    assert delivery_faults(log, ["a", "b", "c"])["placed_not_once"] == 3  # without: a counts too
