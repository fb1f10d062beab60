"""The one explicit map from policy name to the profile that implements it.  No import side effects."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

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
from shared.core.task import TaskShape

ScorerFactory = Callable[[TypicalWorkload, Mapping[str, Any]], ScorePlugin]


def _plain(name: str, build: Callable[[], ScorePlugin]) -> ScorerFactory:
    """A scorer without knobs: any option given is a mistake, said as such."""

    def factory(_workload: TypicalWorkload, options: Mapping[str, Any]) -> ScorePlugin:
        if options:
            raise ValueError(f"policy {name!r} has no options (given: {', '.join(sorted(options))})")
        return build()

    return factory


def _with_args(name: str, args: type[BaseModel], build: Callable[[Any], ScorePlugin]) -> ScorerFactory:
    """A scorer whose knobs are its ``Args`` model: options are validated there (unknown names and
    bad values refused), the workload is the one learnt, never an option."""

    def factory(workload: TypicalWorkload, options: Mapping[str, Any]) -> ScorePlugin:
        if "workload" in options:
            raise ValueError(f"policy {name!r}: the workload is learnt from the jobs, not an option")
        try:
            return build(args(workload=workload, **options))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise ValueError(f"policy {name!r} options: {problems}") from None

    return factory


SCORERS: dict[str, ScorerFactory] = {
    random_fit.NAME: _plain(random_fit.NAME, random_fit.build),
    dot_product.NAME: _plain(dot_product.NAME, dot_product.build),
    gpu_clustering.NAME: _plain(gpu_clustering.NAME, gpu_clustering.build),
    gpu_packing.NAME: _plain(gpu_packing.NAME, gpu_packing.build),
    best_fit.NAME: _plain(best_fit.NAME, best_fit.build),
    fgd.NAME: _with_args(fgd.NAME, fgd.Args, fgd.build),
    tessera.NAME: _with_args(tessera.NAME, tessera.Args, tessera.build),
}

POLICY_NAMES: tuple[str, ...] = tuple(SCORERS)
DEFAULT_POLICY = tessera.NAME


def default_filters() -> list[FilterPlugin]:
    return [node_resources.build(), gpu_model.build(), gpu_fit.build()]


def build_profile(
    policy: str, workload: TypicalWorkload, options: Mapping[str, Any] | None = None
) -> Profile:
    """A fresh profile (scorers keep per-cluster caches, so never share one between clusters).
    ``options``: the scorer's knobs by name (``TESSERA_SCORER_OPTIONS``); a ``ValueError`` names
    what is wrong with them."""
    try:
        factory = SCORERS[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICY_NAMES)}") from None
    return Profile(name=policy, filters=default_filters(), scorer=factory(workload, options or {}))


def check_options(policy: str, options: Mapping[str, Any]) -> None:
    """Raise the ``ValueError`` ``build_profile`` would, before any job has been seen (a service
    checks its settings at start, not at its first placement)."""
    build_profile(policy, TypicalWorkload.from_tasks([TaskShape(cpu_milli=1000)]), options)
