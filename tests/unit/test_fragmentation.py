"""The FGD fragmentation measure on hand-computed examples."""

import numpy as np

from shared.core.cluster import ClusterState
from shared.core.fragmentation import FragmentationModel, TypicalWorkload
from tests.unit.builders import node, task


def _frag(workload: TypicalWorkload, c: ClusterState) -> float:
    model = FragmentationModel(workload, c.models)
    return float(model.frag(c.cpu_free, c.gpu_free, c.model_idx).sum())


def test_an_idle_node_has_no_fragmentation_for_tasks_it_can_host() -> None:
    c = ClusterState([node(gpus=2)])
    workload = TypicalWorkload.from_tasks([task(gpus=1)], coverage=1.0)
    assert _frag(workload, c) == 0.0


def test_partial_gpus_too_small_for_the_typical_task_are_fragments() -> None:
    c = ClusterState([node(gpus=2)])
    c.place(0, task(gpus=1, milli=700), (0,))  # GPU 0 keeps 300 free
    # Half the tasks need 500 (GPU 0's 300 is a fragment for them), half need 200 (nothing is).
    workload = TypicalWorkload.from_tasks([task(gpus=1, milli=500), task(gpus=1, milli=200)], coverage=1.0)
    assert _frag(workload, c) == 0.5 * 300


def test_all_idle_gpu_counts_when_the_node_lacks_cpu_or_the_model() -> None:
    c = ClusterState([node(cpu=4_000, gpus=2, model="T4")])
    needs_cpu = TypicalWorkload.from_tasks([task(cpu=8_000, gpus=1)], coverage=1.0)
    needs_a100 = TypicalWorkload.from_tasks([task(gpus=1, models=("A100",))], coverage=1.0)
    assert _frag(needs_cpu, c) == 2000.0
    assert _frag(needs_a100, c) == 2000.0


def test_cpu_only_tasks_leave_every_idle_gpu_idle() -> None:
    c = ClusterState([node(gpus=4)])
    workload = TypicalWorkload.from_tasks([task(), task(gpus=1)], coverage=1.0)
    assert _frag(workload, c) == 0.5 * 4000


def test_typical_shapes_keep_the_most_popular_until_coverage_and_renormalise() -> None:
    tasks = [task(gpus=1)] * 6 + [task(gpus=1, milli=500)] * 3 + [task(gpus=8)] * 1
    workload = TypicalWorkload.from_tasks(tasks, coverage=0.85)
    assert len(workload) == 2
    assert np.isclose(workload.freq.sum(), 1.0)
    assert np.allclose(sorted(workload.freq), [1 / 3, 2 / 3])
