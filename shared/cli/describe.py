"""``tessera describe JOB``: one job's story from the event log, one line per event.

What each line shows is picked from the event's own fields, so a new event type still shows,
with its fields as they are, until it gets a sentence here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _nodes(bindings: list[Mapping[str, Any]]) -> str:
    nodes = sorted({str(b["node"]) for b in bindings})
    return ", ".join(nodes[:6]) + (f" (+{len(nodes) - 6})" if len(nodes) > 6 else "")


def summary(kind: str, data: Mapping[str, Any], admitted_at: float | None = None) -> str:
    """The line ``tessera describe`` shows for one event of the job."""
    d = data
    if kind == "JobAdmitted":
        spec = d.get("spec", {})
        queue, tenant = spec.get("queue", "default"), spec.get("tenant")
        kind_of = spec.get("workload", "training")  # labels, name too: shown here, not used to decide
        said = f"queue {queue}, tenant {tenant}, {kind_of}, {spec.get('replicas', 1)} replica(s)"
        if spec.get("name"):
            said = f"{spec['name']!r}: {said}"
        promoted = d.get("promoted_class")
        return f"{said}, class {promoted} (the queue's large-jobs rule)" if promoted else said
    if kind == "JobRejected":
        return f"{d.get('code')}: {d.get('reason')}"
    if kind == "JobPlaced":
        bindings = d.get("bindings", [])
        return f"attempt {d.get('attempt', 0)}: {len(bindings)} task(s) on {_nodes(bindings)}"
    if kind == "JobReserved":
        start = d.get("expected_start")
        when = f", expected start +{start - admitted_at:.0f} s" if admitted_at is not None and start else ""
        return f"holds {', '.join(d.get('nodes', []))}{when}"
    if kind == "JobGrowRequested":
        return f"grow to {d.get('replicas')} replicas on {_nodes(d.get('added', []))}"
    if kind == "PreemptionRequested":
        size = d.get("resize_to")
        what = "evict" if size is None else f"shrink to {size} replica(s)"
        said = f"{what} for {d.get('by_job')} (grace {d.get('grace_s', 0):g} s)"
        return f"{said}: {d['reason']}" if d.get("reason") else said
    if kind in ("JobStarted", "JobFinished"):
        return f"task {d.get('task', 0)} on {d.get('node')}, attempt {d.get('attempt', 0)}"
    if kind == "JobFailed":
        where = f"task {d.get('task', 0)} on {d.get('node')}"
        return f"{where}: exit {d.get('exit_code')} {d.get('reason', '')}".rstrip()
    shown = {k: v for k, v in d.items() if k not in ("type", "job_id", "node_versions")}
    return ", ".join(f"{k}={v}" for k, v in shown.items())
