"""How long a consumer lets records gather before a fetch returns.

By default a Kafka fetch returns as soon as one record is there, and the consumer asks again at
once: under a steady trickle every consumer sends a request per event or two, and on a small
machine the broker's and the clients' per-request work costs more than the data.  Waiting up to
``wait_ms`` for 64 KiB bounds the requests to ~1000/``wait_ms`` a second per consumer and adds at
most ``wait_ms`` to each hop; a burst fills 64 KiB at once and does not wait.  Measured with
``loadtests/bench_pipeline.py`` at 200 jobs/s, 10 ms cut Kafka's CPU per placement by ~30% but
raised the p50 submit-to-placement latency from ~90 to ~150 ms (several hops wait), so the
default (``TESSERA_FETCH_WAIT_MS=0``) is Kafka's own: answer at the first byte.
"""

from __future__ import annotations

FETCH_MIN_BYTES = 64 * 1024


def fetch_options(wait_ms: int) -> dict[str, int]:
    """Keyword arguments for ``AIOKafkaConsumer``."""
    if wait_ms <= 0:
        return {}
    return {"fetch_max_wait_ms": wait_ms, "fetch_min_bytes": FETCH_MIN_BYTES}
