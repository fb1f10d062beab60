"""The placement worker's kept snapshot builder decides what a fresh one decides.

The builder keeps the pending jobs in order and the running jobs from cycle to cycle and looks
again only at the jobs the view's change feed names (and tells the cycle's memo how the pending
jobs changed).  Here a random workload runs through many cycles, with admissions, placements,
reservations that time out into back-offs, and ends; at every cycle the kept builder's snapshot
must equal a fresh one, and the intents planned from it must be the same events.
"""

from __future__ import annotations

import numpy as np
import pytest

from schemas import JobSpec
from schemas.events import JobAdmitted, JobFinished, JobStarted, NodeRegistered
from schemas.node import GpuDevice, NodeInventory
from services.placement.handlers import plan
from shared.core.cycle import CycleConfig
from shared.core.fragmentation import TypicalWorkload
from shared.core.registry import DEFAULT_POLICY, build_profile
from shared.core.task import TaskShape
from shared.state.snapshot import SnapshotBuilder, build_snapshot
from tests.folded_log import Log


def _config() -> CycleConfig:
    shapes = [TaskShape(cpu_milli=1000, memory_mib=1024, num_gpu=g, gpu_milli=1000) for g in (1, 2, 4, 8)]
    workload = TypicalWorkload.from_tasks(shapes)
    assert workload is not None
    # A short reservation timeout, so reservations expire into back-offs within the run.
    return CycleConfig(build_profile(DEFAULT_POLICY, workload), reserve_timeout_s=300.0, min_runtime_s=0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_kept_builder_plans_what_a_fresh_snapshot_plans(seed: int) -> None:
    rng = np.random.default_rng(seed)
    log = Log()
    for n in range(3):
        gpus = [GpuDevice(index=i, model="T4") for i in range(8)]
        log.add(
            f"node-n{n}",
            NodeRegistered(inventory=NodeInventory(name=f"n{n}", cpu="64", memory="256Gi", gpus=gpus)),
        )
    config = _config()
    planner, watcher = SnapshotBuilder(), SnapshotBuilder()
    running: dict[str, tuple[str, int]] = {}  # job -> (node, replicas)
    seen = {"placed": 0, "reserved": 0, "backoff": 0, "ended": 0}
    admitted = 0
    for cycle in range(60):
        for _ in range(int(rng.integers(0, 4))):
            spec = JobSpec.model_validate(
                {
                    "id": f"j{admitted}",
                    "tenant": "t",
                    "queue": str(rng.choice(["a", "b"])),
                    "priority": int(rng.choice([0, 0, 100])),
                    "checkpointable": True,
                    "resources": {"cpu": "1", "nvidia.com/gpu": int(rng.choice([1, 2, 4, 8]))},
                }
            )
            log.add(f"job-j{admitted}", JobAdmitted(spec=spec))
            admitted += 1
        now = log.clock
        kept, fresh = watcher.build(log.view, now), build_snapshot(log.view, now)
        assert kept is not None and fresh is not None
        assert [j.id for j in kept.pending] == [j.id for j in fresh.pending]
        assert kept.pending_delta is not None or cycle == 0
        assert dict(kept.reservations) == dict(fresh.reservations)
        assert dict(kept.backoff) == dict(fresh.backoff)
        assert sorted(r.job.id for r in kept.running) == sorted(r.job.id for r in fresh.running)
        seen["backoff"] += bool(fresh.backoff)
        mine = [j.id for j in fresh.pending]
        a = plan(log.view, mine, config, now, np.random.default_rng(cycle), builder=planner)
        b = plan(log.view, mine, config, now, np.random.default_rng(cycle))
        assert [(e.stream, e.data) for e in a.events] == [(e.stream, e.data) for e in b.events]
        assert a.waiting == b.waiting and a.reserved == b.reserved
        log.take(a.units)
        seen["reserved"] += sum(e.data["type"] == "JobReserved" for e in a.events)
        for e in a.events:
            if e.data["type"] == "JobPlaced" and e.stream.startswith("job-"):
                job = e.data["job_id"]
                running[job] = (e.data["bindings"][0]["node"], len(e.data["bindings"]))
                log.add(f"job-{job}", JobStarted(job_id=job, node=running[job][0]))
                seen["placed"] += 1
        for job in sorted(running):
            if rng.random() < 0.15:
                node, _ = running.pop(job)
                log.add(f"job-{job}", JobFinished(job_id=job, node=node))
                seen["ended"] += 1
        log.clock += float(rng.choice([1.0, 60.0, 400.0]))
    # The run went through every kind of change the builder follows.
    assert all(seen.values()), seen
