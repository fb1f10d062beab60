"""The Prometheus alerting rules shipped in ``infra/prometheus/`` parse, and name only metrics
the services serve (a misspelt metric makes an alert that never fires, silently)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import promql_parser
import yaml
from prometheus_client import REGISTRY

import shared.metrics  # noqa: F401  (defines the services' metrics in the registry)

RULES = Path(__file__).resolve().parents[2] / "infra" / "prometheus" / "tessera-alerts.yml"
SUFFIXES = ("_total", "_bucket", "_count", "_sum")  # a sample's name is its family's plus one


def _selected(node: Any) -> set[str]:
    """Metric names of every vector selector in a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        return {node.name} if node.name else set()  # ``{__name__=~"..."}`` names none
    found: set[str] = set()
    for attr in ("lhs", "rhs", "expr", "args", "vector_selector", "param"):
        child = getattr(node, attr, None)
        for c in child if isinstance(child, list) else [child]:
            if c is not None and hasattr(c, "prettify"):
                found |= _selected(c)
    return found


def _served() -> set[str]:
    """Metric families of the registry (a labelled one has no sample until a label is used)."""
    return {family.name for family in REGISTRY.collect()}


def test_every_alert_parses_and_names_only_metrics_the_services_serve() -> None:
    rules = [r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]]
    assert len(rules) >= 5
    served = _served()
    for rule in rules:
        assert rule["alert"].startswith("Tessera") and rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        names = _selected(promql_parser.parse(rule["expr"]))
        assert names, rule["alert"]
        for name in names - {"up"}:  # ``up`` is Prometheus' own, per scrape target
            family = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
            assert family in served, f"{rule['alert']}: {name} is not served (shared/metrics.py)"


def test_a_misspelt_metric_is_caught() -> None:
    names = _selected(promql_parser.parse("increase(tessera_placement_cycle_total[5m]) == 0"))
    assert names == {"tessera_placement_cycle_total"} and "tessera_placement_cycle" not in _served()
