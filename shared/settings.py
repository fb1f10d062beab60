"""Every knob of the services and the CLI, in one place (pydantic-settings).

Each setting is read from the environment (``TESSERA_<NAME>``; the two addresses also under
their usual names) and documented by its ``Field`` description: ``tessera config`` prints them
with their values now, and ``tessera config --markdown`` writes the README's table, which a test
keeps equal to it.  The ports ``infra/`` starts its servers on are the shell scripts' own
(``TESSERA_KAFKA_PORT``, ``TESSERA_KAFKA_CONTROLLER_PORT``, ``TESSERA_PG_PORT``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.bus.topics import TopicNames
from shared.core.plugins.order.priority_age import RequeueAt
from shared.core.plugins.order.within import OrderWithin

PREFIX = "TESSERA_"
DEFAULT_QUEUES: dict[str, list[str]] = {
    "default": ["*"],
    "research": ["*"],
    "batch": ["*"],
    "inference": ["*"],
}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore")

    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:19092",
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP_SERVERS", "TESSERA_KAFKA_BOOTSTRAP_SERVERS"),
        description="Kafka brokers (`tessera infra up` starts one here)",
    )
    database_url: str = Field(
        "postgresql://tessera@127.0.0.1:15432/tessera",
        validation_alias=AliasChoices("DATABASE_URL", "TESSERA_DATABASE_URL"),
        description="the PostgreSQL event store (`tessera infra up` starts one here)",
    )
    topic_partitions: int = Field(8, ge=1, description="partitions of each command topic created")
    topic_prefix: str = Field(
        "tessera",
        pattern=r"^[A-Za-z0-9._-]+$",
        description="topic and consumer-group prefix (several stacks on one broker)",
    )
    relay_batch: int = Field(500, ge=1, description="relay: events per read of the log")
    relay_poll_s: float = Field(
        0.2, gt=0, description="relay: how often it reads the log when no NOTIFY arrives"
    )
    db_pool_max: int = Field(10, ge=1, description="asyncpg pool size per process")
    start_wait_s: float = Field(
        30.0,
        ge=0,
        description="services: how long one waits at start for Kafka and PostgreSQL to answer (a service "
        "may start before them) before it exits with the error",
    )
    cli_reach_s: float = Field(
        3.0,
        gt=0,
        description="CLI: how long a command waits for Kafka to answer before it says it cannot reach it "
        "(services wait `TESSERA_START_WAIT_S`, since they may start before the broker)",
    )
    kafka_max_poll_interval_s: float = Field(
        300.0,
        gt=0,
        description="admission and placement: Kafka's `max.poll.interval.ms` for their consumer groups; a "
        "consumer stuck longer (waiting out a PostgreSQL outage) leaves its group, rejoins when it polls "
        "again and is given its uncommitted work once more (admission ignores a submission it already "
        "admitted)",
    )
    gather_ms: int = Field(
        5,
        ge=0,
        le=500,
        description="after a poll that brought records, a consumer waits this long before polling again, so "
        "busy services take events in batches while idle ones long-poll as Kafka does by default (0: never "
        "wait; see `shared/bus/gather.py`)",
    )
    gc_sweep_s: float = Field(
        600.0,
        gt=0,
        description="services freeze what survives each full garbage collection, so the next ones scan only "
        "newer objects (measured pauses of 100-430 ms otherwise); this often everything is unfrozen and "
        "revisited once",
    )
    keep_ended_jobs: int = Field(
        10_000,
        ge=100,
        description="services: ended jobs (finished, failed, cancelled) each service keeps in memory, the "
        "last to end; older ones live on in the event log only (without a bound a service's memory and "
        "snapshots grew with every job ever run)",
    )
    snapshot_every: int = Field(
        50_000,
        ge=100,
        description="placement: save a snapshot of the folded view once the newest is this many events old "
        "(a restart replays at most that many)",
    )
    queues: dict[str, list[str]] = Field(
        default_factory=lambda: {q: list(t) for q, t in DEFAULT_QUEUES.items()},
        description='admission: the queues and the tenants allowed on each, as JSON (`{"team-a": ["alice"], '
        '"shared": ["*"]}`) until a queue tree is applied with `tessera queue apply`; default: four queues '
        "open to every tenant (default, research, batch, inference)",
    )
    scorer_options: dict[str, float | bool] = Field(
        default_factory=dict,
        description='placement: the scorer\'s knobs as JSON, e.g. `{"scarcity": false}`; for `tessera`: '
        "packing_weight, cpu_weight, band, gpu_fit_weight, conditional, pressure_weight, scarcity, "
        "share_view, pairing (README, "
        '"Tessera\'s policy, and why"); `fgd` and the baselines have none.  A worker refuses to start on a '
        "name or value its policy does not take",
    )
    preempt_grace_s: float = Field(
        30.0,
        ge=0,
        description="placement and preemption: a checkpointable victim's time between the stop signal and "
        "SIGKILL (other victims: 0)",
    )
    preempt_min_runtime_s: float = Field(
        600.0, ge=0, description="placement: a job that started less than this ago is not preempted"
    )
    preempt_max_per_job: int = Field(
        3,
        ge=0,
        description="placement: a job preempted (or moved) this many times is not evicted again, so no "
        "job is bounced forever (0: no evictions; elastic jobs may still shrink)",
    )
    preempt_restart_overhead_s: float = Field(
        60.0,
        ge=0,
        description="placement: the seconds of work a checkpointed victim loses to one restart (save, "
        "reload, warm-up); an eviction must spare the preemptor more waiting than its victims lose",
    )
    consolidate: bool = Field(
        True,
        description="placement: move small checkpointable jobs (one restart each) to free room elsewhere "
        "when that gives the blocked job holding the reservation the whole nodes it needs; false: only "
        "evictions by priority, reclaim and starvation move work",
    )
    spare_scarce_homes: bool = Field(
        True,
        description="placement: a task keeps off the only nodes a more constrained waiting job can run on "
        "(one pinned to a GPU model few nodes have, or asking more cores than most nodes have) while it fits "
        "elsewhere, so those nodes drain for that job; false: every feasible node is scored alike",
    )
    requeue_timestamp: RequeueAt = Field(
        "eviction",
        description="placement: where an evicted job queues again in its queue's order (Kueue's "
        "`requeuingStrategy.timestamp`): `eviction`, behind the jobs that came before it was evicted (jobs "
        "that never ran go first: a low average JCT); `creation`, at its submission time (evicted long "
        "jobs finish sooner: more work done by a date, at a higher average JCT)",
    )
    order_within: OrderWithin = Field(
        "age",
        description="placement: the order of a queue's jobs within a priority class: `age`, oldest first; "
        "`response-ratio`, highest (wait + expected run time) / expected run time first, the expected run "
        "time being the job's `duration-s`, else the mean learnt from its tenant's finished jobs of its "
        "shape (short jobs first, a long job ages in by its own length: a lower average JCT where jobs "
        'declare durations; README, "Order in a queue")',
    )
    grow_every_s: float = Field(
        1.0,
        ge=0,
        description="placement: with nothing pending, a cycle that only grows elastic jobs runs at most this "
        "often (each grow restarts the job from its checkpoint)",
    )
    stop_signal: str = Field(
        "SIGTERM", pattern=r"^SIG[A-Z0-9]+$", description="agent: the signal an evicted task gets first"
    )
    checkpoint_root: str = Field(
        ".local/checkpoints",
        description="agent: `TESSERA_CHECKPOINT_DIR` is `<root>/<job id>`, the same for every attempt "
        "(put it on shared storage when jobs may move between machines)",
    )
    agent_state_dir: str = Field(
        ".local/agent", description="agent: task ends not yet in the log wait here, across restarts"
    )
    heartbeat_s: float = Field(5.0, gt=0, description="agent: lease renewal period")
    lease_s: float = Field(
        30.0, gt=0, description="preemption: a node not heard from this long becomes NotReady"
    )
    requeue_after_s: float = Field(
        30.0, ge=0, description="preemption: a NotReady node's jobs are evicted after this much more"
    )
    stop_report_s: float = Field(
        10.0,
        ge=0,
        description="preemption: past an eviction's deadline, how long to wait for tasks on NotReady nodes "
        "before counting them lost",
    )
    stats_dir: Path = Field(
        Path(".local/run"),
        description="readiness markers (`<service>.ready`) and placement counters (`placement-<name>.json`)",
    )
    service_name: str = Field(
        "",
        description="the name a service process marks itself ready under and profiles to (`tessera up` sets "
        "it; default: the service's own name)",
    )
    log_level: str = Field("INFO", description="service log level")
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="a service serves Prometheus metrics at `http://TESSERA_METRICS_ADDR:PORT/metrics` (0: "
        "not served; `tessera up --metrics-port BASE` gives each service its own port from BASE)",
    )
    metrics_addr: str = Field(
        "127.0.0.1", description="the address metrics are served on (`0.0.0.0` for a scraper elsewhere)"
    )
    profile: Path | None = Field(
        None,
        description="developer aid: a folder; every service runs under cProfile and writes "
        "`<service>.prof` there when it stops",
    )

    @property
    def kafka_max_poll_interval_ms(self) -> int:
        return round(self.kafka_max_poll_interval_s * 1000)

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)


@dataclass(frozen=True)
class Knob:
    """One setting as an operator sees it: its variable, default, value now and meaning."""

    variable: str
    default: str
    value: str
    meaning: str


def _shown(value: object) -> str:
    if value is None or value == "" or value == {}:
        return "unset"
    if isinstance(value, dict):
        return ", ".join(sorted(value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def knobs(settings: Settings | None = None) -> list[Knob]:
    """Every setting, in declaration order, with the value ``settings`` (default: the
    environment's) gives it."""
    settings = settings or Settings()
    rows = []
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        variable = str(alias.choices[0]) if isinstance(alias, AliasChoices) else PREFIX + name.upper()
        default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
        rows.append(Knob(variable, _shown(default), _shown(getattr(settings, name)), field.description or ""))
    return rows


def settings_errors(exc: ValidationError) -> list[str]:
    """One line per bad setting, named by its environment variable (``TESSERA_LEASE_S: Input
    should be greater than 0``).  Only the plain-string settings have other names
    (``DATABASE_URL``), and a string is never refused."""
    return [f"{PREFIX}{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}" for err in exc.errors()]


def markdown_table() -> str:
    """The README's settings table (``tessera config --markdown``)."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    lines += [f"| `{k.variable}` | `{k.default}` | {k.meaning} |" for k in knobs(Settings.model_construct())]
    return "\n".join(lines) + "\n"
