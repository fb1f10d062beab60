"""The one explicit map from policy name to the profile that implements it.  No import side effects."""

from __future__ import annotations

from collections.abc import Callable

from shared.core.fragmentation import TypicalWorkload
from shared.core.framework import FilterPlugin, Profile, ScorePlugin
from shared.core.plugins.filters import gpu_fit, gpu_model, node_resources
from shared.core.plugins.scorers import (
    best_fit,
    dot_product,
    fgd,
    gpu_clustering,
    gpu_packing,
    random_fit,
    tessera,
)

ScorerFactory = Callable[[TypicalWorkload], ScorePlugin]

SCORERS: dict[str, ScorerFactory] = {
    random_fit.NAME: lambda _w: random_fit.build(),
    dot_product.NAME: lambda _w: dot_product.build(),
    gpu_clustering.NAME: lambda _w: gpu_clustering.build(),
    gpu_packing.NAME: lambda _w: gpu_packing.build(),
    best_fit.NAME: lambda _w: best_fit.build(),
    fgd.NAME: lambda w: fgd.build(fgd.Args(workload=w)),
    tessera.NAME: lambda w: tessera.build(tessera.Args(workload=w)),
}

POLICY_NAMES: tuple[str, ...] = tuple(SCORERS)
DEFAULT_POLICY = tessera.NAME


def default_filters() -> list[FilterPlugin]:
    return [node_resources.build(), gpu_model.build(), gpu_fit.build()]


def build_profile(policy: str, workload: TypicalWorkload) -> Profile:
    """A fresh profile (scorers keep per-cluster caches, so never share one between clusters)."""
    try:
        factory = SCORERS[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICY_NAMES)}") from None
    return Profile(name=policy, filters=default_filters(), scorer=factory(workload))
