"""CPU seconds used by each part of a live stack, read from ``/proc`` (Linux).

On a 2-core machine every process of the stack (services, Kafka's JVM, PostgreSQL's backends and
the benchmark itself) competes for the same cores, so wall-clock profiles mostly measure waiting.
What a placement really costs is the CPU time each process burns for it: ``utime + stime`` of
``/proc/<pid>/stat``, summed per part between two readings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: str) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15)


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class CpuMeter:
    """Reads the CPU seconds of named processes and of Kafka and PostgreSQL, found by command line.

    ``named`` maps a label to a pid (the stack's services, the benchmark); every other process whose
    command line names Kafka's main class or is a PostgreSQL server process is counted under
    ``kafka`` or ``postgres``.  Processes that exit between two readings lose their last interval
    (a PostgreSQL backend closing): negligible against a run's total.
    """

    def __init__(self, named: Mapping[str, int]) -> None:
        self.named = {str(pid): label for label, pid in named.items()}

    def _label(self, pid: str) -> str | None:
        if pid in self.named:
            return self.named[pid]
        cmd = _cmdline(pid)
        if "kafka.Kafka" in cmd:
            return "kafka"
        if cmd.startswith("postgres") or "/postgresql/" in cmd.split(" ", 1)[0]:
            return "postgres"
        return None

    def read(self) -> dict[str, dict[str, float]]:
        """Per pid: label and CPU seconds so far."""
        out: dict[str, dict[str, float]] = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            label = self._label(pid)
            if label is None:
                continue
            seconds = _cpu_seconds(pid)
            if seconds is not None:
                out[pid] = {label: seconds}
        return out

    @staticmethod
    def used(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, float]:
        """CPU seconds per label between two readings."""
        total: dict[str, float] = {}
        for pid, now in after.items():
            (label, seconds), *_ = now.items()
            earlier = before.get(pid, {}).get(label, 0.0)
            total[label] = total.get(label, 0.0) + seconds - earlier
        return {k: round(v, 2) for k, v in sorted(total.items(), key=lambda kv: -kv[1])}
