"""Service configuration from the environment (pydantic-settings).  Every knob, with its default.

=========================  =====================================  =================================
variable                   default                                meaning
=========================  =====================================  =================================
KAFKA_BOOTSTRAP_SERVERS    127.0.0.1:19092                        Kafka brokers (infra/kafka.sh)
DATABASE_URL               postgresql://tessera@127.0.0.1:15432/  PostgreSQL event store
                           tessera                                (infra/postgres.sh)
TESSERA_TOPIC_PARTITIONS   8                                      partitions of each topic created
TESSERA_RELAY_BATCH        500                                    events per relay read
TESSERA_RELAY_POLL_S       0.2                                    relay poll when no NOTIFY arrives
TESSERA_DB_POOL_MAX        10                                     asyncpg pool size per process
TESSERA_TOPIC_PREFIX       tessera                                topic and consumer-group prefix
TESSERA_START_WAIT_S       30                                     services: how long one waits at start
                                                                  for Kafka and PostgreSQL to answer
                                                                  before it exits with the error
TESSERA_CLI_REACH_S        3                                      CLI: how long a command waits for
                                                                  Kafka to answer before saying it
                                                                  cannot reach it (services wait
                                                                  30 s: they may start before it)
TESSERA_KAFKA_MAX_POLL_    300                                    admission, placement: a consumer
INTERVAL_S                                                        that has not polled for this long
                                                                  (stuck while PostgreSQL is away)
                                                                  leaves its group; it rejoins and
                                                                  takes its uncommitted work again
TESSERA_GATHER_MS          5                                      consumers: after a poll that
                                                                  brought records, wait this long
                                                                  before the next (0: never)
TESSERA_GC_SWEEP_S         600                                    services: full garbage collections
                                                                  skip state frozen since the last
                                                                  one; everything is revisited this
                                                                  often (shared/service.py)
TESSERA_SNAPSHOT_EVERY     50000                                  placement: save a snapshot of the
                                                                  folded view once the newest one is
                                                                  this many events old
TESSERA_PREEMPT_GRACE_S    30                                     placement: a checkpointable
                                                                  victim's time between SIGTERM and
                                                                  SIGKILL (others: 0)
TESSERA_PREEMPT_MIN_       600                                    placement: a job that started less
RUNTIME_S                                                         than this ago is not preempted
TESSERA_GROW_EVERY_S       1                                      placement: with nothing pending, a
                                                                  cycle that only grows elastic jobs
                                                                  runs at most this often (each grow
                                                                  restarts the job)
TESSERA_STOP_SIGNAL        SIGTERM                                agent: sent first to an evicted
                                                                  task (it may checkpoint)
TESSERA_CHECKPOINT_ROOT    .local/checkpoints                     agent: TESSERA_CHECKPOINT_DIR is
                                                                  <root>/<job id>, kept across
                                                                  attempts
TESSERA_AGENT_STATE_DIR    .local/agent                           agent: unreported task ends wait
                                                                  here (survive a restart)
TESSERA_HEARTBEAT_S        5                                      agent: lease renewal period
TESSERA_LEASE_S            30                                     preemption: a node not heard from
                                                                  this long becomes NotReady
TESSERA_REQUEUE_AFTER_S    30                                     preemption: jobs on a NotReady node
                                                                  are requeued after this much more
TESSERA_STOP_REPORT_S      10                                     preemption: past an eviction's
                                                                  deadline, how long to wait for a
                                                                  NotReady node's agent to report
=========================  =====================================  =================================
"""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.bus.topics import TopicNames


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TESSERA_", extra="ignore")

    kafka_bootstrap_servers: str = Field(
        "127.0.0.1:19092",
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP_SERVERS", "TESSERA_KAFKA_BOOTSTRAP_SERVERS"),
    )
    database_url: str = Field(
        "postgresql://tessera@127.0.0.1:15432/tessera",
        validation_alias=AliasChoices("DATABASE_URL", "TESSERA_DATABASE_URL"),
    )
    topic_partitions: int = Field(8, ge=1)
    relay_batch: int = Field(500, ge=1)
    relay_poll_s: float = Field(0.2, gt=0)
    db_pool_max: int = Field(10, ge=1)
    topic_prefix: str = Field("tessera", pattern=r"^[A-Za-z0-9._-]+$")
    snapshot_every: int = Field(50_000, ge=100)
    start_wait_s: float = Field(30.0, ge=0)
    cli_reach_s: float = Field(3.0, gt=0)
    kafka_max_poll_interval_s: float = Field(300.0, gt=0)
    gather_ms: int = Field(5, ge=0, le=500)
    gc_sweep_s: float = Field(600.0, gt=0)
    preempt_grace_s: float = Field(30.0, ge=0)
    preempt_min_runtime_s: float = Field(600.0, ge=0)
    grow_every_s: float = Field(1.0, ge=0)
    stop_signal: str = Field("SIGTERM", pattern=r"^SIG[A-Z0-9]+$")
    checkpoint_root: str = ".local/checkpoints"
    agent_state_dir: str = ".local/agent"
    heartbeat_s: float = Field(5.0, gt=0)
    lease_s: float = Field(30.0, gt=0)
    requeue_after_s: float = Field(30.0, ge=0)
    stop_report_s: float = Field(10.0, ge=0)

    @property
    def kafka_max_poll_interval_ms(self) -> int:
        return round(self.kafka_max_poll_interval_s * 1000)

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)
