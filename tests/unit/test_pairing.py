"""Pairing of GPU shares (``shared/core/pairing.py``): the fluid packing's patterns, the final
waste of each GPU state, and the choice of GPU it leads Tessera's scorer to."""

import numpy as np
import pytest

from shared.core.cluster import ClusterState
from shared.core.cycle import CycleConfig, Place, Snapshot, run_cycle
from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import decide
from shared.core.jobs import Job
from shared.core.pairing import demand_per_model, final_waste, fluid_patterns, pairing_table
from shared.core.plugins.scorers.tessera import sharing_shapes
from shared.core.registry import build_profile
from shared.core.task import TaskShape
from tests.unit.builders import cluster, node, task


def test_shares_that_complete_each_other_form_one_pattern() -> None:
    patterns = fluid_patterns({600: 1.0, 400: 1.0})
    assert [p for p, _ in patterns] == [(600, 400)]
    assert patterns[0][1] == pytest.approx(1.0)
    w = final_waste(patterns)
    assert w[0] == 0 and w[600] == 0 and w[400] == 0 and w[1000] == 0
    assert w[800] == 200  # two 400m shares: on no planned GPU, the 200m left is lost


def test_the_fluid_packing_pairs_the_shares_that_waste_least() -> None:
    # 650m+320m leaves 30m, 470m+470m 60m; 470m+320m would leave 210m.
    patterns = dict(fluid_patterns({650: 1.0, 320: 1.0, 470: 2.0}))
    assert set(patterns) == {(650, 320), (470, 470)}
    assert patterns[(650, 320)] == pytest.approx(1.0) and patterns[(470, 470)] == pytest.approx(1.0)
    w = final_waste(list(patterns.items()))
    assert w[470] == 60 and w[940] == 60 and w[320] == 30 and w[970] == 30
    assert w[470 + 320] == 210


def test_a_share_alone_pairs_with_itself() -> None:
    patterns = fluid_patterns({470: 1.0})
    assert [p for p, _ in patterns] == [(470, 470)]
    assert patterns[0][1] == pytest.approx(0.5)
    assert final_waste(patterns)[470] == 60


def test_share_sizes_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="strictly between"):
        fluid_patterns({1000: 1.0})


def _workload(*shapes: TaskShape) -> TypicalWorkload:
    return TypicalWorkload.from_tasks(shapes, coverage=1.0)


def test_each_gpu_model_packs_only_the_shares_that_may_use_it() -> None:
    w = _workload(task(gpus=1, milli=470), task(gpus=1, milli=470), task(gpus=1, milli=320, models=("T4",)))
    gpus = np.array([8.0, 8.0])
    demand = demand_per_model(w, ("A100", "T4"), gpus)
    assert set(demand[0]) == {470} and set(demand[1]) == {470, 320}
    table = pairing_table(w, ("A100", "T4"), gpus)
    assert table.shape == (3, 1001)
    assert table[0, 470] == 60  # on A100s only 470m shares come: they pair with each other
    assert table[0, 320] == 680  # a 320m share is on no A100 pattern
    assert table[1, 320] < 680  # on T4s it is planned


def test_without_constraints_every_model_gets_the_same_table() -> None:
    w = _workload(task(gpus=1, milli=470), task(gpus=1, milli=650), task(gpus=1, milli=320), task(gpus=1))
    table = pairing_table(w, ("A100", "T4"), np.array([8.0, 2.0]))
    assert np.array_equal(table[0], table[1])


def _gpu_for(c: ClusterState, t: TaskShape, workload: TypicalWorkload, view: bool, pairing: bool) -> int:
    profile = build_profile("tessera", workload, {"share_view": view, "pairing": pairing})
    decision = decide(c, t, profile, np.random.default_rng(1))
    assert decision.status.ok, decision.status
    return decision.gpus[0]


def test_a_share_keeps_off_the_hole_a_better_partner_will_fill() -> None:
    # Half the tasks take whole GPUs; the shares come as 470m, 320m and 650m alike.  GPU 0 holds
    # a 470m share: the next 470m one would leave 60m there, a 320m one 210m that nothing planned
    # fills.  FGD's view counts the idle GPU 1 as lost to whole-GPU tasks once a share opens it,
    # so the scorer used to fill the hole.  Judged by the shapes that can share a GPU, and by the
    # final waste of the fluid packing's patterns, the 320m share opens GPU 1 for a 650m partner
    # (30m left).  Each half alone is not enough here.
    shapes = [task(gpus=1, milli=m) for m in (470, 470, 320, 320, 650, 650)]
    workload = _workload(*shapes, *[task(gpus=1)] * 8)
    c = cluster(node(gpus=2))
    c.place(0, task(gpus=1, milli=470), (0,))
    share = task(gpus=1, milli=320)
    chosen = {(v, p): _gpu_for(c, share, workload, v, p) for v in (False, True) for p in (False, True)}
    assert chosen == {(False, False): 0, (False, True): 0, (True, False): 0, (True, True): 1}
    # A 470m share completes the planned pair.
    assert _gpu_for(c, task(gpus=1, milli=470), workload, True, True) == 0


def test_the_share_view_holds_only_while_no_whole_gpu_work_waits() -> None:
    # The scene above, in a cycle: a 2-GPU job that does not fit is pending beside the 320m
    # share.  Once it has waited (submitted before the cycle's time), whole GPUs are short now,
    # not only at the end, so the share is judged as FGD judges it and takes the hole on GPU 0;
    # submitted at the cycle's time, it has not waited, and the view sends the share to GPU 1.
    shapes = [task(gpus=1, milli=m) for m in (470, 470, 320, 320, 650, 650)]
    workload = _workload(*shapes, *[task(gpus=1)] * 8)
    c = cluster(node(gpus=2))
    c.place(0, task(gpus=1, milli=470), (0,))
    config = CycleConfig(build_profile("tessera", workload), reserve=False, preempt=False)

    def share_gpu(big_since: float) -> int:
        big = Job(id="big", queue="q", tenant="t", shape=task(gpus=2), submitted=big_since)
        share = Job(id="share", queue="q", tenant="t", shape=task(gpus=1, milli=320), submitted=100.0)
        result = run_cycle(Snapshot(c, [big, share]), config, 100.0, np.random.default_rng(0))
        [place] = [i for i in result.intents if isinstance(i, Place)]
        assert place.job == "share"
        return place.placements[0].gpus[0]

    assert share_gpu(big_since=0.0) == 0
    assert share_gpu(big_since=100.0) == 1
    assert share_gpu(big_since=0.0) == 0  # decided afresh each cycle


def test_the_share_view_leaves_out_only_1_gpu_whole_gpu_shapes_that_may_run_anywhere() -> None:
    pinned = task(cpu=2_000, gpus=1, models=("T4",))
    w = _workload(task(gpus=1, milli=470), task(gpus=1), task(gpus=2), task(), pinned)
    view = sharing_shapes(w)
    assert view is not None
    # Kept: the share, the CPU-only task, the 2-GPU task (it needs two whole GPUs on one node)
    # and the pinned one (its pool can run out of whole GPUs before the cluster does).
    assert sorted(zip(view.num_gpu.tolist(), view.gpu_milli.tolist(), view.models, strict=True)) == [
        (0, 0, ()),
        (1, 470, ()),
        (1, 1000, ("T4",)),
        (2, 1000, ()),
    ]
    assert view.freq.sum() == pytest.approx(0.8)  # not rescaled
    assert sharing_shapes(_workload(task(gpus=1, milli=470), task())) is None  # nothing left out
    assert sharing_shapes(_workload(task(gpus=1), task())) is None  # no GPU shape would be left
