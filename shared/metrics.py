"""Prometheus metrics: what each service counts, served at ``http://ADDR:PORT/metrics``.

Every service process serves its own registry when ``TESSERA_METRICS_PORT`` is set (``tessera
up --metrics-port BASE`` gives each service the next port from BASE): the counters below that
it touches, and the client library's process metrics (CPU seconds, resident memory, open
files).  A scrape that answers is the service's liveness; ``TESSERA_STATS_DIR/<name>.ready``
stays its readiness.  Names follow Prometheus' conventions (``_total`` counters, base units).
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics, start_http_server

from shared.settings import Settings

log = logging.getLogger("tessera.metrics")

ADMISSION_VERDICTS = Counter(
    "tessera_admission_verdicts_total",
    "Commands admission decided, by verdict (admitted, rejected, duplicate, conflict, ...)",
    ["verdict"],
)
PLACEMENT_CYCLES = Counter("tessera_placement_cycles_total", "Scheduling cycles a placement worker ran")
PLACEMENT_CYCLE_SECONDS = Histogram(
    "tessera_placement_cycle_seconds",
    "Time one scheduling cycle took to plan (run_cycle and the snapshot), appends excluded",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
PLACEMENTS = Counter("tessera_placements_total", "Jobs a placement worker placed (its appends written)")
PLACEMENT_LATENCY_SECONDS = Histogram(
    "tessera_placement_latency_seconds",
    "From a job's admission to its placement being written",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)
PLACEMENT_CONFLICTS = Counter(
    "tessera_placement_conflicts_total", "Appends refused because another writer moved a node first"
)
PLACEMENT_EVENTS = Counter(
    "tessera_placement_events_total",
    "Events placement workers appended, by type (JobPlaced, JobReserved, PreemptionRequested, ...)",
    ["type"],
)
PENDING_JOBS = Gauge("tessera_pending_jobs", "Jobs waiting in this worker's view after its last cycle")
WAITING_JOBS = Gauge(
    "tessera_waiting_jobs",
    "This worker's jobs its last cycle left waiting, by why (the plugin or rule that stopped them: "
    "GpuFit, QueueMax, QueueDepth, Reserved, ...)",
    ["kind"],
)
QUEUE_GPUS = Gauge(
    "tessera_queue_gpus",
    "Per queue (a parent counts its subtree), GPUs by kind: guarantee, max (+Inf: none), deserved "
    "(its fair share now), used, borrowed (used beyond the guarantee); as `tessera queue show`",
    ["queue", "kind"],
)
QUEUE_JOBS = Gauge(
    "tessera_queue_jobs",
    "Per queue (a parent counts its subtree), jobs pending and running",
    ["queue", "state"],
)
PREEMPTION_EVENTS = Counter(
    "tessera_preemption_events_total",
    "Events the preemption service appended, by type (EvictionStarted, JobPreempted, NodeNotReady, ...)",
    ["type"],
)
RELAY_PUBLISHED = Counter("tessera_relay_published_total", "Events the relay published to Kafka")
AGENT_TASKS_STARTED = Counter("tessera_agent_tasks_started_total", "Tasks an agent claimed and started")
AGENT_TASK_ENDS = Counter(
    "tessera_agent_task_ends_total",
    "Task ends an agent recorded, by event (JobFinished, JobFailed, TaskStopped); started minus "
    "ended is what runs",
    ["type"],
)
AGENT_TASKS_RUNNING = Gauge(
    "tessera_agent_tasks_running",
    "Tasks whose processes run on this agent's nodes now (an evicted one until it has exited)",
)
STORE_RETRIES = Counter(
    "tessera_store_retries_total", "Calls retried because PostgreSQL was unavailable (each wait counts once)"
)


def serve(settings: Settings) -> int | None:
    """Serve ``/metrics`` on ``settings.metrics_port`` (0: not at all); the port, or None.  A port
    already taken is logged and skipped: metrics are worth less than the service."""
    if not settings.metrics_port:
        return None
    # A ``_created`` twin per series says nothing a restart does not.  (The library leaves it untyped.)
    disable_created_metrics()  # type: ignore[no-untyped-call]
    try:
        start_http_server(settings.metrics_port, addr=settings.metrics_addr)
    except OSError as exc:
        log.warning("metrics not served on %s:%d: %s", settings.metrics_addr, settings.metrics_port, exc)
        return None
    return settings.metrics_port
