import numpy as np

from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import Code
from shared.core.registry import build_profile, default_filters
from tests.unit.builders import cluster, node, task


def test_filters_keep_only_nodes_with_room_for_every_dimension() -> None:
    c = cluster(node("small", cpu=2_000, gpus=1), node("big", cpu=64_000, gpus=8), node("cpu", gpus=0))
    mask = np.ones(c.size, dtype=bool)
    for f in default_filters():
        mask &= f.filter(c, task(cpu=4_000, gpus=2))
    assert [c.names[i] for i in np.flatnonzero(mask)] == ["big"]


def test_a_shared_task_fits_where_one_gpu_has_the_share_free() -> None:
    c = cluster(node(gpus=1))
    c.place(0, task(gpus=1, milli=600), (0,))
    masks = [f.filter(c, task(gpus=1, milli=400)) for f in default_filters()]
    assert all(m[0] for m in masks)
    assert not any(f.filter(c, task(gpus=1, milli=500))[0] for f in default_filters()[2:])


def test_the_status_tells_now_from_never_and_names_the_filter() -> None:
    c = cluster(node(gpus=2))
    workload = TypicalWorkload.from_tasks([task(gpus=1)], coverage=1.0)
    profile = build_profile("bestfit", workload)
    c.place(0, task(gpus=2), (0, 1))
    _, busy = profile.feasible(c, task(gpus=1))
    assert busy.code is Code.UNSCHEDULABLE and busy.plugin == "GpuFit"
    _, never = profile.feasible(c, task(gpus=16))
    assert never.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "no node can ever hold" in never.reason
