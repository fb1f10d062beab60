"""Each service serves its Prometheus metrics where ``TESSERA_METRICS_PORT`` says, and a port
already taken costs the metrics, never the service."""

from __future__ import annotations

import socket
import urllib.request

from loadtests.live_stack import free_port
from shared import metrics
from shared.settings import Settings


def test_metrics_are_served_on_the_configured_port_and_not_without_one() -> None:
    assert metrics.serve(Settings(metrics_port=0)) is None
    port = free_port()
    assert metrics.serve(Settings(metrics_port=port)) == port
    metrics.PLACEMENTS.inc(3)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    assert "# TYPE tessera_placements_total counter" in text
    line = next(x for x in text.splitlines() if x.startswith("tessera_placements_total "))
    assert float(line.split()[1]) >= 3
    assert "process_resident_memory_bytes" in text  # the client library's process metrics


def test_a_port_already_taken_is_skipped_without_an_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        assert metrics.serve(Settings(metrics_port=port)) is None
