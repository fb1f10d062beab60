"""Philly with run times drawn from the logged ones: the list, the expectation the cluster is sized
from, and the workload variant (same arrivals, sizes and queues; each seed its own draw)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shared.sim.runtimes import expected_clipped, load_runtimes
from shared.sim.trace import TraceError
from shared.sim.workload import philly_workload

PHILLY = Path(__file__).resolve().parents[2] / "loadtests" / "traces" / "philly"
FOLDER, TABLE = PHILLY / "gavel-derived-per-vc-seed0", PHILLY / "gavel_isolated_throughputs.csv"


def test_the_list_is_read_sorted_with_runs_under_a_second_counted_as_one(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("runtime\n30\n0\n\n7.5\n")
    assert load_runtimes(path).tolist() == [1.0, 7.5, 30.0]


BAD_LISTS = [("runtime\n30\nabc\n", 3), ("runtime\n-4\n", 2), ("runtime\n", 1)]


@pytest.mark.parametrize(("body", "line"), BAD_LISTS)
def test_a_bad_list_names_its_file_and_line(tmp_path: Path, body: str, line: int) -> None:
    path = tmp_path / "r.csv"
    path.write_text(body)
    with pytest.raises(TraceError, match=f"r.csv:{line}:"):
        load_runtimes(path)


def test_the_expected_clipped_run_time_matches_the_sum_it_stands_for() -> None:
    runtimes = np.array([1.0, 2.0, 10.0, 100.0])
    limits = np.array([0.5, 2.0, 50.0, 1e9])
    by_hand = [float(np.mean(np.minimum(runtimes, t))) for t in limits]
    assert expected_clipped(runtimes, limits).tolist() == pytest.approx(by_hand)


def test_the_logged_philly_run_times_are_shorter_than_gavels_and_heavy_tailed() -> None:
    # What the variant is for (shared/sim/runtimes.py): another run-time law.
    logged = load_runtimes(PHILLY / "philly_runtimes.csv")
    assert len(logged) == 83_154
    assert 15 * 60 < float(np.median(logged)) < 25 * 60  # about 20 minutes
    assert float(logged.mean()) > 10 * float(np.median(logged))


def test_drawn_run_times_keep_the_trace_and_the_cluster_and_differ_by_seed() -> None:
    runtimes = np.array([60.0, 600.0, 36_000.0])
    plain = philly_workload(FOLDER, TABLE, 0.9)
    a = philly_workload(FOLDER, TABLE, 0.9, compress=7.0, jitter_seed=42, runtimes=runtimes)
    b = philly_workload(FOLDER, TABLE, 0.9, compress=7.0, jitter_seed=43, runtimes=runtimes)
    assert a.nodes == b.nodes  # sized from the expected draw, not from a seed's
    assert [(j.queue, j.gpus) for j in a.jobs] == [(j.queue, j.gpus) for j in plain.jobs]
    assert [j.submit for j in a.jobs] == pytest.approx([j.submit / 7 for j in plain.jobs])
    assert {j.work_s for j in a.jobs} == set(runtimes.tolist())
    assert [j.work_s for j in a.jobs] != [j.work_s for j in b.jobs]
    again = philly_workload(FOLDER, TABLE, 0.9, compress=7.0, jitter_seed=42, runtimes=runtimes)
    assert [j.work_s for j in again.jobs] == [j.work_s for j in a.jobs]
    # The queues' weights are their expected GPU-hours: with one law for every job, their GPUs.
    gpus = {q: sum(j.gpus for j in a.jobs if j.queue == q) for q in a.queues.leaves}
    total = sum(gpus.values())
    weights = {q: a.queues.specs[q].weight for q in gpus}
    assert weights == pytest.approx({q: g / total for q, g in gpus.items()})
    # The expected offered load is what the cluster was sized for; a draw lands near it.
    assert 0.75 < a.offered_load() < 1.05
