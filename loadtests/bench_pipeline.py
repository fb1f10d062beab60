"""Submit-to-placement latency and placement throughput through the real stack.

For 1 and then 2 placement workers, on the 1,523-node openb cluster (one simulated agent process),
openb trace jobs are produced to Kafka in three phases, each measured on its own:

* **paced**: ``--rate`` jobs/s (default 200) for ``--seconds`` (10): the latency goal's load.
  Latency = ``JobPlaced`` commit time minus the moment the job was produced (p50, p99).
* **sustained**: ``--sustain-rate`` jobs/s (default 600, above the 500/s goal) for
  ``--sustain-seconds`` (6): placements/s
  = (placements - 1) / (last placement - first placement), which is the offered rate while the
  stack keeps up and its capacity once it falls behind (latency then grows through the phase:
  its p99 is reported too).
* **burst**: ``--burst`` jobs (1,000) produced at once: jobs placed / (last placement - first
  submission), the peak rate.

A **warm-up** (``--warmup-seconds``, 2 s at the paced rate) comes first and is reported apart: the
first second after a stack starts (fresh database, new topics, policy learnt from the first jobs)
is several times slower than what follows.  Jobs run for an hour, so nothing leaves: the phases
(7,400 jobs) fill the cluster's GPUs to about 85%.  For every phase the CPU seconds of each
process (services, Kafka, PostgreSQL, this benchmark) are read from ``/proc`` and reported per
placement.  Conflicts are the appends the workers had to retry.  Each run uses a scratch
database and topic prefix.  ``--out DIR`` writes per-job timings (CSV) and a plot of latency
against submission time.  Ends with one JSON line ``{"workers": {"1": {"placements_per_s": ..,
"p50_ms": .., "p99_ms": .., "conflicts": ..}, "2": {...}}}``.

    .venv/bin/python loadtests/bench_pipeline.py [--workers 1,2] [--out out/bench-pipeline]
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
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt
from rich.console import Console
from rich.table import Table

from loadtests.cpu_meter import CpuMeter
from loadtests.live_stack import LiveStack
from schemas.job import JobSpec
from shared.bus import BusProducer, ensure_topics
from shared.bus.producer import await_acks
from shared.cli import stack
from shared.settings import Settings
from shared.sim.trace import load_pods
from tests.conftest import create_database, drop_database

FloatArray = npt.NDArray[np.float64]
TRACES = Path(__file__).resolve().parent / "traces" / "alibaba-gpu-v2023"


async def produce(
    producer: BusProducer, topic: str, specs: list[JobSpec], rate: float | None
) -> dict[str, float]:
    """Produce ``SubmitJob`` messages at ``rate`` per second (all at once when None); send times.

    The generator shares the two cores with the stack it measures, so it does as little as it
    can while the clock runs: every message is encoded first, and the messages due are sent
    every 5 ms tick (one wake-up per tick, not per message), each stamped when it is sent.  The
    producer stays open across phases, as a real client's would (a new one makes its first
    messages wait for the client to start).
    """
    from schemas import SubmitJob

    messages = [(spec.id, SubmitJob(spec=spec).model_dump_json(by_alias=True).encode()) for spec in specs]
    sent: dict[str, float] = {}
    acks = []
    begin, done = time.perf_counter(), 0
    while done < len(messages):
        due = len(messages) if not rate else min(len(messages), int((time.perf_counter() - begin) * rate) + 1)
        now = time.time()
        for key, value in messages[done:due]:
            sent[key] = now
            acks.append(await producer.enqueue(topic, value, key))
        done = due
        if done < len(messages):
            await asyncio.sleep(0.005)
    await await_acks(acks)
    return sent


class LogWatcher:
    """Commit times of ``JobAdmitted``/``JobPlaced`` per job, read incrementally from the log.

    The benchmark shares the machine with the stack it measures, so it reads only what is new
    (re-reading the whole log every second cost the stack ~20% of a core).
    """

    def __init__(self, database: str, meter: CpuMeter | None = None) -> None:
        self.database = database
        self.meter = meter
        self.progress_cpu: dict[str, dict[str, float]] | None = None  # CPU read at the last new placement
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
        self.progress_cpu = None
        while True:
            await self.poll()
            done = len(ids & self.times["JobPlaced"].keys())
            if done != seen:
                seen, last_change = done, time.time()
                self.progress_cpu = self.meter.read() if self.meter is not None else None
            if done == len(ids) or time.time() > deadline or time.time() - last_change > stall:
                return self.times["JobPlaced"]
            await asyncio.sleep(0.25)

    async def close(self) -> None:
        if self._con is not None:
            await self._con.close()


@dataclass
class Phase:
    """One measured phase: when each job was produced, admitted and placed, and the CPU it took."""

    name: str
    sent: dict[str, float]
    admitted: dict[str, float]
    placed: dict[str, float]
    cpu_s: dict[str, float]

    def latencies_ms(self) -> FloatArray:
        return np.array([1000 * (self.placed[j] - t) for j, t in self.sent.items() if j in self.placed])

    def throughput(self) -> float:
        """Placements per second from the first submission to the last placement (a burst's rate:
        the time to the first placement counts)."""
        done = [self.placed[j] for j in self.sent if j in self.placed]
        return len(done) / (max(done) - min(self.sent.values())) if done else 0.0

    def placement_rate(self) -> float:
        """Placements per second from the first placement to the last: the offered rate while the
        stack keeps up, its capacity once it falls behind (a sustained phase's rate)."""
        done = sorted(self.placed[j] for j in self.sent if j in self.placed)
        return (len(done) - 1) / (done[-1] - done[0]) if len(done) > 1 and done[-1] > done[0] else 0.0

    def cpu_ms_per_placement(self) -> dict[str, float]:
        n = max(1, sum(j in self.placed for j in self.sent))
        return {k: round(1000 * v / n, 2) for k, v in self.cpu_s.items()}


async def measure(
    name: str,
    live: LiveStack,
    producer: BusProducer,
    watcher: LogWatcher,
    meter: CpuMeter,
    specs: list[JobSpec],
    rate: float | None,
) -> Phase:
    before = meter.read()
    sent = await produce(producer, live.settings.topics.submissions, specs, rate)
    placed = dict(await watcher.wait_placed(set(sent), 180))
    # CPU up to the last new placement, not through the final wait for stragglers.
    after = watcher.progress_cpu or meter.read()
    admitted = {j: watcher.times["JobAdmitted"][j] for j in sent if j in watcher.times["JobAdmitted"]}
    return Phase(name, sent, admitted, placed, CpuMeter.used(before, after))


@dataclass(frozen=True)
class Load:
    name: str
    jobs: int
    rate: float | None  # jobs/s; None: all at once


async def run(workers: int, loads: list[Load], console: Console, out: Path | None) -> dict[str, Any]:
    settings = Settings()
    database = await create_database(settings.database_url)
    folder = Path(tempfile.mkdtemp(prefix="tessera-bench-"))
    live = LiveStack(settings.kafka_bootstrap_servers, database, f"bench{uuid.uuid4().hex[:8]}", folder)
    pods = sorted(load_pods(TRACES / "openb_pod_list_default.csv"), key=lambda p: (p.creation_time, p.name))
    # Long runs (1 h): nothing finishes during the measurement, so every placement is a new one.
    tag = uuid.uuid4().hex[:6]
    specs = [
        stack.spec_from_trace(p).model_copy(update={"id": f"{p.name}-{tag}-{i}", "duration_s": 3600.0})
        for i, p in enumerate(pods[: sum(load.jobs for load in loads)])
    ]
    phases: dict[str, Phase] = {}
    try:
        with console.status(f"{workers} worker(s): starting the stack on 1,523 simulated nodes"):
            await live.standard(
                workers, ["--mode", "simulated", "--nodes", str(TRACES / "openb_node_list_all_node.csv")]
            )
        meter = CpuMeter({**live.pids(), "benchmark": os.getpid()})
        watcher = LogWatcher(database, meter)
        s = live.settings
        await ensure_topics(s.kafka_bootstrap_servers, s.topic_partitions, names=s.topics)
        producer = BusProducer(s.kafka_bootstrap_servers, client_id="bench")
        await producer.start()
        try:
            start = 0
            for load in loads:
                what = f"{load.rate:.0f} jobs/s" if load.rate else "all at once"
                with console.status(f"{workers} worker(s), {load.name}: {load.jobs} jobs, {what}"):
                    batch = specs[start : start + load.jobs]
                    phases[load.name] = await measure(
                        load.name, live, producer, watcher, meter, batch, load.rate
                    )
                start += load.jobs
        finally:
            await producer.stop()
            await watcher.close()
        stats = live.stats()
    finally:
        await live.stop()
        await live.delete_topics()
        await drop_database(settings.database_url, database)
    for phase in phases.values():
        cpu = phase.cpu_ms_per_placement()
        lat = phase.latencies_ms()
        rate = phase.throughput() if phase.name == "burst" else phase.placement_rate()
        console.print(
            f"{workers} worker(s), {phase.name}: {rate:.0f} placements/s, latency p50 "
            f"{np.percentile(lat, 50):.0f} / p99 {np.percentile(lat, 99):.0f} ms; CPU ms per placement "
            + ", ".join(f"{k} {v}" for k, v in cpu.items())
            + f"; total {sum(cpu.values()):.2f}"
        )
        missing = [j for j in phase.sent if j not in phase.placed]
        if missing:
            console.print(f"  not placed ({len(missing)}): {', '.join(missing[:5])}")
    for st in stats:
        console.print(f"  worker {st['worker']}: {st['placements']} placements, time in {st['seconds']}")
    if out is not None:
        write_timings(out / f"pipeline-{workers}w.csv", tuple(phases.values()))
    paced, sustained, bursty = phases["paced"], phases["sustained"], phases["burst"]
    lat = paced.latencies_ms()
    to_admit = np.array(
        [1000 * (paced.admitted[j] - t) for j, t in paced.sent.items() if j in paced.admitted]
    )
    return {
        "placements_per_s": round(sustained.placement_rate(), 1),
        "p50_ms": round(float(np.percentile(lat, 50)), 1) if lat.size else float("nan"),
        "p99_ms": round(float(np.percentile(lat, 99)), 1) if lat.size else float("nan"),
        "conflicts": int(sum(int(s["conflicts"]) for s in stats)),
        "admit_p50_ms": round(float(np.percentile(to_admit, 50)), 1) if to_admit.size else float("nan"),
        "admit_p99_ms": round(float(np.percentile(to_admit, 99)), 1) if to_admit.size else float("nan"),
        "sustained_offered_per_s": sustained_rate(loads),
        "sustained_p99_ms": round(float(np.percentile(sustained.latencies_ms(), 99)), 1),
        "warmup_p99_ms": round(float(np.percentile(phases["warm-up"].latencies_ms(), 99)), 1)
        if "warm-up" in phases and phases["warm-up"].placed
        else float("nan"),
        "burst_placements_per_s": round(bursty.throughput(), 1),
        "placed": {
            name: f"{sum(j in ph.placed for j in ph.sent)}/{len(ph.sent)}" for name, ph in phases.items()
        },
        "cpu_ms_per_placement": {name: ph.cpu_ms_per_placement() for name, ph in phases.items()},
    }


def sustained_rate(loads: list[Load]) -> float:
    return next(load.rate or 0.0 for load in loads if load.name == "sustained")


def write_timings(path: Path, phases: tuple[Phase, ...]) -> None:
    """Per job: phase, produced, admitted and placed (epoch seconds; empty when it never was)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        f.write("phase,job,sent,admitted,placed\n")
        for phase in phases:
            for job, t in phase.sent.items():
                a, p = phase.admitted.get(job, ""), phase.placed.get(job, "")
                f.write(f"{phase.name},{job},{t:.6f},{a},{p}\n")


def plot(out: Path, workers: list[int]) -> None:
    """Submit-to-placement latency against submission time, one panel per worker count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(workers), figsize=(6 * len(workers), 4), squeeze=False)
    for ax, w in zip(axes[0], workers, strict=True):
        rows = [line.split(",") for line in (out / f"pipeline-{w}w.csv").read_text().splitlines()[1:]]
        start = min(float(r[2]) for r in rows)
        colours = {
            "warm-up": "tab:grey",
            "paced": "tab:blue",
            "sustained": "tab:green",
            "burst": "tab:orange",
        }
        for phase, colour in colours.items():
            pts = [
                (float(r[2]) - start, 1000 * (float(r[4]) - float(r[2])))
                for r in rows
                if r[0] == phase and r[4]
            ]
            if pts:
                x, y = zip(*pts, strict=True)
                ax.scatter(x, y, s=2, color=colour, label=phase)
        ax.set_yscale("log")
        ax.axhline(250, color="grey", linestyle="--", linewidth=0.8)
        ax.set_title(f"{w} placement worker(s)")
        ax.set_xlabel("submitted at (s)")
        ax.set_ylabel("submit -> placed (ms)")
        ax.legend(markerscale=4)
    fig.tight_layout()
    fig.savefig(out / "pipeline-latency.png", dpi=110)


async def main(loads: list[Load], workers: list[int], out: Path | None) -> None:
    console = Console(width=120)
    results = {str(w): await run(w, loads, console, out) for w in workers}
    paced = next(load for load in loads if load.name == "paced")
    table = Table(
        title=f"pipeline on 1,523 simulated nodes: {paced.rate:.0f} jobs/s, then "
        f"{sustained_rate(loads):.0f} jobs/s, then a burst of {loads[-1].jobs}"
    )
    for col in (
        "workers",
        f"placements/s at {sustained_rate(loads):.0f}/s offered",
        "burst placements/s",
        f"p50 / p99 ms at {paced.rate:.0f}/s",
        f"p99 ms at {sustained_rate(loads):.0f}/s",
        "CPU ms/placement (paced / sustained / burst)",
        "conflicts",
    ):
        table.add_column(col, justify="right")
    for w, r in results.items():
        cpu = r["cpu_ms_per_placement"]
        table.add_row(
            w,
            f"{r['placements_per_s']:.0f}",
            f"{r['burst_placements_per_s']:.0f}",
            f"{r['p50_ms']:.0f} / {r['p99_ms']:.0f}",
            f"{r['sustained_p99_ms']:.0f}",
            " / ".join(f"{sum(cpu[p].values()):.2f}" for p in ("paced", "sustained", "burst")),
            str(r["conflicts"]),
        )
    console.print(table)
    if out is not None:
        plot(out, workers)
        console.print(f"per-job timings and pipeline-latency.png in {out}")
    print(json.dumps({"workers": results}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="live pipeline benchmark")
    parser.add_argument("--rate", type=float, default=200.0, help="paced phase: jobs/s (latency goal)")
    parser.add_argument("--seconds", type=float, default=10.0, help="paced phase: seconds")
    parser.add_argument(
        "--warmup-seconds", type=float, default=2.0, help="before it, at the same rate, reported apart"
    )
    parser.add_argument("--sustain-rate", type=float, default=600.0, help="sustained phase: jobs/s")
    parser.add_argument("--sustain-seconds", type=float, default=6.0, help="sustained phase: seconds")
    parser.add_argument("--burst", type=int, default=1000, help="burst phase: jobs produced at once")
    parser.add_argument("--workers", default="1,2", help="placement worker counts to measure")
    parser.add_argument("--out", type=Path, default=None, help="folder for per-job timings (CSV) and a plot")
    a = parser.parse_args()
    phases = [
        Load("warm-up", int(a.rate * a.warmup_seconds), a.rate),
        Load("paced", int(a.rate * a.seconds), a.rate),
        Load("sustained", int(a.sustain_rate * a.sustain_seconds), a.sustain_rate),
        Load("burst", a.burst, None),
    ]
    phases = [load for load in phases if load.jobs > 0 or load.name != "warm-up"]
    asyncio.run(main(phases, [int(w) for w in a.workers.split(",")], a.out))
