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
    gather_ms: int = Field(5, ge=0, le=500)
    gc_sweep_s: float = Field(600.0, gt=0)

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)
