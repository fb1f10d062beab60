"""Every example file the README points to is valid: a job the spec accepts and the scheduler
honours, or a queue tree the core accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from schemas.job import JobSpec
from schemas.queues import QueueTreeSpec
from shared.state.honoured import unhonoured
from shared.state.wire import queue_tree

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_example_is_valid(path: Path) -> None:
    body = yaml.safe_load(path.read_text())
    if body["kind"] == "QueueTree":
        tree = queue_tree(QueueTreeSpec.model_validate(body))
        assert tree.leaves
    else:
        assert unhonoured(JobSpec.model_validate(body)) == []


def test_there_are_examples_of_both_kinds() -> None:
    kinds = {yaml.safe_load(p.read_text())["kind"] for p in EXAMPLES}
    assert kinds == {"Job", "QueueTree"}


def test_the_example_tree_does_what_its_comments_say() -> None:
    from shared.core.queues import LargeJobRule
    from shared.state.wire import admitted_priority

    folder = EXAMPLES[0].parent
    tree = queue_tree(QueueTreeSpec.model_validate(yaml.safe_load((folder / "queues.yaml").read_text())))
    day, rule = 86400.0, LargeJobRule(8, "high")
    assert tree.preempt_after_s == {
        "research": day,
        "nlp": day,
        "vision": day,
        "inference": None,
        "default": None,
    }
    assert tree.large_jobs == {
        "research": rule,
        "nlp": rule,
        "vision": rule,
        "inference": None,
        "default": None,
    }
    # The example gang (32 GPUs, queue nlp) asks for high already; as normal it would be raised.
    gang = JobSpec.model_validate(yaml.safe_load((folder / "gang-train.yaml").read_text()))
    assert admitted_priority(tree, gang) == (100, None)
    as_normal = gang.model_copy(update={"priority_class": None, "priority": 0})
    assert admitted_priority(tree, as_normal) == (100, rule)


def test_the_example_tree_admits_every_example_job() -> None:
    """The README's walk-through applies the tree, then submits the jobs: none may be refused."""
    folder = EXAMPLES[0].parent
    tree = queue_tree(QueueTreeSpec.model_validate(yaml.safe_load((folder / "queues.yaml").read_text())))
    jobs = [
        JobSpec.model_validate(b) for p in EXAMPLES if (b := yaml.safe_load(p.read_text()))["kind"] == "Job"
    ]
    assert len(jobs) >= 2
    for job in jobs:
        assert tree.barred(job.queue, job.tenant) is None, job.id
