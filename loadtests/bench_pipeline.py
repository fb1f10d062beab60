"""Submit-to-placement latency and placement throughput through the real stack.

For 1 and then 2 placement workers, on the 1,523-node openb cluster (one simulated agent process):

* **paced**: openb jobs produced to Kafka at ``--rate`` jobs/s (default 200) for ``--seconds``;
  latency = ``JobPlaced`` commit time minus the moment the job was produced (p50, p99);
* **burst**: ``--burst`` jobs produced at once; placements/s = jobs placed / (last placement -
  first submission).
Conflicts are the failed appends the workers retried.  Each run uses a scratch database and topic
prefix.  Ends with one JSON line ``{"workers": {"1": {...}, "2": {...}}}``.

    .venv/bin/python loadtests/bench_pipeline.py [--rate 200 --seconds 15 --burst 3000]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Runnable as a script: the repository root (for loadtests.* and tests.*) goes on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from typing import Any

import asyncpg
import numpy as np
from rich.console import Console
from rich.table import Table

from loadtests.cpu_meter import CpuMeter
from loadtests.live_stack import LiveStack
from shared.bus import BusProducer, ensure_topics
from shared.bus.producer import await_acks
from shared.cli import stack
from shared.settings import Settings
from shared.sim.trace import load_pods
from tests.conftest import create_database, drop_database

TRACES = Path(__file__).resolve().parent / "traces" / "alibaba-gpu-v2023"


async def produce(live: LiveStack, specs: list, rate: float | None) -> dict[str, float]:  # type: ignore[type-arg]
    from schemas import SubmitJob

    s = live.settings
    await ensure_topics(s.kafka_bootstrap_servers, s.topic_partitions, names=s.topics)
    sent: dict[str, float] = {}
    acks = []
    async with BusProducer(s.kafka_bootstrap_servers, client_id="bench") as producer:
        begin = time.perf_counter()
        for i, spec in enumerate(specs):
            if rate:
                await asyncio.sleep(max(0.0, begin + i / rate - time.perf_counter()))
            sent[spec.id] = time.time()
            # Queued, not awaited one by one: a burst is produced as fast as the client can batch it.
            acks.append(await producer.enqueue_model(s.topics.submissions, SubmitJob(spec=spec), key=spec.id))
        await await_acks(acks)
    return sent


class LogWatcher:
    """Commit times of ``JobAdmitted``/``JobPlaced`` per job, read incrementally from the log.

    The benchmark shares the machine with the stack it measures, so it reads only what is new
    (re-reading the whole log every second cost the stack ~20% of a core).
    """

    def __init__(self, database: str) -> None:
        self.database = database
        self.times: dict[str, dict[str, float]] = {"JobAdmitted": {}, "JobPlaced": {}}
        self._cursor = 0
        self._con: asyncpg.Connection | None = None

    async def poll(self) -> None:
        if self._con is None:
            self._con = await asyncpg.connect(self.database)
        # Only the columns needed, never the JSON bodies: the stack's own events cost it nothing.
        while rows := await self._con.fetch(
            "SELECT position, stream, type, recorded_at FROM events WHERE position > $1"
            " AND type = ANY($2::text[]) AND stream LIKE 'job-%' ORDER BY position LIMIT 20000",
            self._cursor,
            list(self.times),
        ):
            self._cursor = rows[-1]["position"]
            for r in rows:
                self.times[r["type"]][r["stream"].removeprefix("job-")] = r["recorded_at"].timestamp()

    async def wait_placed(self, ids: set[str], timeout: float, stall: float = 10.0) -> dict[str, float]:
        """Until every job is placed, ``timeout`` passes, or nothing new was placed for ``stall`` s."""
        deadline = time.time() + timeout
        seen, last_change = -1, time.time()
        while True:
            await self.poll()
            done = len(ids & self.times["JobPlaced"].keys())
            if done != seen:
                seen, last_change = done, time.time()
            if done == len(ids) or time.time() > deadline or time.time() - last_change > stall:
                return self.times["JobPlaced"]
            await asyncio.sleep(1.0)

    async def close(self) -> None:
        if self._con is not None:
            await self._con.close()


async def run(workers: int, rate: float, seconds: float, burst: int, console: Console) -> dict[str, Any]:
    settings = Settings()
    database = await create_database(settings.database_url)
    folder = Path(tempfile.mkdtemp(prefix="tessera-bench-"))
    live = LiveStack(settings.kafka_bootstrap_servers, database, f"bench{uuid.uuid4().hex[:8]}", folder)
    pods = sorted(load_pods(TRACES / "openb_pod_list_default.csv"), key=lambda p: (p.creation_time, p.name))
    # Long runs (1 h): nothing finishes during the measurement, so every placement is a new one.
    tag = uuid.uuid4().hex[:6]
    specs = [
        stack.spec_from_trace(p).model_copy(update={"id": f"{p.name}-{tag}-{i}", "duration_s": 3600.0})
        for i, p in enumerate(pods[: int(rate * seconds) + burst])
    ]
    paced, bursty = specs[: int(rate * seconds)], specs[int(rate * seconds) :]
    watcher = LogWatcher(database)
    try:
        with console.status(f"{workers} worker(s): starting the stack on 1,523 simulated nodes"):
            await live.standard(
                workers, ["--mode", "simulated", "--nodes", str(TRACES / "openb_node_list_all_node.csv")]
            )
        meter = CpuMeter({**live.pids(), "benchmark": os.getpid()})
        cpu_before = meter.read()
        with console.status(f"{workers} worker(s): {rate:.0f} jobs/s for {seconds:.0f} s"):
            sent = await produce(live, paced, rate)
            times = dict(await watcher.wait_placed(set(sent), 120))
        lat = np.array([1000 * (times[j] - t) for j, t in sent.items() if j in times])
        admitted = watcher.times["JobAdmitted"]
        to_admit = np.array([1000 * (admitted[j] - t) for j, t in sent.items() if j in admitted])
        p50, p99 = np.percentile(to_admit, 50), np.percentile(to_admit, 99)
        console.print(f"{workers} worker(s): submit->admitted p50 {p50:.0f} ms, p99 {p99:.0f} ms")
        with console.status(f"{workers} worker(s): burst of {burst} jobs"):
            sent_b = await produce(live, bursty, None)
            times_b = await watcher.wait_placed(set(sent_b), 180)
        placed_b = [times_b[j] for j in sent_b if j in times_b]
        cpu = CpuMeter.used(cpu_before, meter.read())
        placed_all = lat.size + len(placed_b)
        cpu_ms = {k: round(1000 * v / max(1, placed_all), 2) for k, v in cpu.items()}
        console.print(
            f"{workers} worker(s): CPU ms per placement (paced + burst, {placed_all} placed): "
            + ", ".join(f"{k} {v}" for k, v in cpu_ms.items())
            + f"; total {sum(cpu_ms.values()):.1f}"
        )
        span = max(placed_b) - min(sent_b.values()) if placed_b else float("inf")
        stats = live.stats()
        for st in stats:
            console.print(f"  worker {st['worker']}: {st['placements']} placements, time in {st['seconds']}")
    finally:
        await watcher.close()
        await live.stop()
        await drop_database(settings.database_url, database)
    return {
        "placements_per_s": round(len(placed_b) / span, 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat.size else float("nan"),
        "p99_ms": round(float(np.percentile(lat, 99)), 1) if lat.size else float("nan"),
        "conflicts": int(sum(int(s["conflicts"]) for s in stats)),
        "paced_placed": int(lat.size),
        "paced_jobs": len(paced),
        "burst_placed": len(placed_b),
        "cpu_ms_per_placement": cpu_ms,
    }


async def main(rate: float, seconds: float, burst: int, workers: list[int]) -> None:
    console = Console(width=120)
    results = {str(w): await run(w, rate, seconds, burst, console) for w in workers}
    table = Table(
        title=f"pipeline on 1,523 simulated nodes: {rate:.0f} jobs/s paced, then a burst of {burst}"
    )
    for col in (
        "workers",
        "placements/s (burst)",
        "p50 ms (paced)",
        "p99 ms (paced)",
        "conflicts retried",
        "placed",
    ):
        table.add_column(col, justify="right")
    for w, r in results.items():
        table.add_row(
            w,
            f"{r['placements_per_s']:.0f}",
            f"{r['p50_ms']:.0f}",
            f"{r['p99_ms']:.0f}",
            str(r["conflicts"]),
            f"{r['paced_placed']}/{r['paced_jobs']} + {r['burst_placed']}/{burst}",
        )
    console.print(table)
    print(json.dumps({"workers": results}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="live pipeline benchmark")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--workers", default="1,2", help="worker counts to measure")
    a = parser.parse_args()
    asyncio.run(main(a.rate, a.seconds, a.burst, [int(w) for w in a.workers.split(",")]))
