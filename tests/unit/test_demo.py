"""The demo's plan: a busy cluster, three queues, a gang, and the same jobs for the simulator."""

from __future__ import annotations

from shared.cli.demo import ELASTIC_ID, GANG_ID, TEAMS, as_workload, plan
from shared.cli.main import DEFAULT_PODS, TRACES
from shared.sim.trace import load_nodes, load_pods


def test_the_plan_samples_every_node_kind_caps_run_times_and_inserts_the_gang() -> None:
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    p = plan(nodes, load_pods(DEFAULT_PODS), 1200, 0.02, 60.0, 30.0, "t", gang_after=400)
    kinds = {(n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib) for n in nodes}
    assert {(n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib) for n in p.nodes} == kinds
    assert len(p.jobs) == 1202 and p.jobs[400].id == f"{GANG_ID}-t"
    assert p.jobs[400].replicas == 3 and p.jobs[400].min_replicas == 3
    elastic = p.jobs[401]
    assert elastic.id == f"{ELASTIC_ID}-t" and (elastic.min_replicas, elastic.max_replicas) == (1, 4)
    assert elastic.checkpointable  # only checkpointable elastic jobs grow
    assert all(0 < (j.duration_s or 0) <= 30.0 for j in p.jobs if j is not elastic)
    assert elastic.duration_s == 90.0  # it outlives the backlog, to grow as the cluster drains
    assert {j.queue for j in p.jobs} == set(TEAMS) and all(j.tenant == j.queue for j in p.jobs)
    guarantees = [q.guarantee.gpu or 0 for q in p.tree.queues]
    assert sum(guarantees) <= p.total_gpus
    w = as_workload(p, {j.id: 1000.0 + i / 40 for i, j in enumerate(p.jobs)})
    assert len(w.jobs) == 1202 and w.jobs[0].submit == 0.0 and w.jobs[400].replicas == 3
    assert (w.jobs[401].replicas, w.jobs[401].min_replicas) == (4, 1)  # elastic in the simulator too
    # At the demo's defaults it offers more than the cluster holds while the jobs arrive.
    assert w.offered_load() > 1.0


def test_the_elastic_jobs_history_reads_its_placement_resizes_and_end() -> None:
    from datetime import UTC, datetime

    from shared.cli.demo import resize_history
    from shared.eventstore.port import RecordedEvent

    def ev(t: float, kind: str, **data: object) -> RecordedEvent:
        return RecordedEvent(0, "job-el", 0, kind, {"type": kind, **data}, {}, datetime.fromtimestamp(t, UTC))

    b = {"task": 0, "node": "n", "cpu_milli": 1, "memory_mib": 1}
    events = [
        ev(105.0, "JobPlaced", bindings=[b]),
        ev(106.0, "JobStarted"),
        ev(120.0, "JobGrowRequested", replicas=3),
        ev(121.5, "JobResized", replicas=3),
        ev(130.0, "PreemptionRequested", resize_to=2, by_job="hi"),
        ev(131.0, "JobResized", replicas=2),
        ev(150.0, "JobFinished"),
        ev(150.5, "JobFinished"),
    ]
    assert resize_history(events, 100.0) == [
        "produced at 0 s",
        "placed with 1 at +5.0 s",
        "grow to 3 asked at +20.0 s",
        "restarted with 3 at +21.5 s",
        "shrink to 2 for hi asked at +30.0 s",
        "restarted with 2 at +31.0 s",
        "finished at +50.5 s",
    ]
