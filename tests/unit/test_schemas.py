import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from schemas import JobSpec, SubmitJob
from schemas.commands import CommandAdapter
from schemas.events import EventAdapter, JobAdmitted, JobPlaced, JobRejected, TaskBinding
from schemas.export import MODELS, write_schemas
from schemas.queues import QueueTreeSpec, duration_s, duration_text
from shared.state.fold import ClusterView
from shared.state.queue_usage import queue_usage
from shared.state.wire import queue_tree

JOB_YAML = """
apiVersion: tessera/v1
kind: Job
id: llama-ft-7
tenant: nlp
queue: research
workload: fine-tuning
priority: 100
replicas: 4
resources:
  cpu: "8"
  memory: 64Gi
  nvidia.com/gpu: 2
gpu-type: A100|H100
gang: {min-member: 4}
elastic: "2:8"
checkpointable: true
command: [torchrun, train.py]
"""


def test_a_yaml_job_file_validates_against_the_wire_model() -> None:
    spec = JobSpec.model_validate(yaml.safe_load(JOB_YAML))
    assert spec.resources.cpu == 8000
    assert spec.resources.memory == 65536
    assert spec.resources.num_gpu == 2 and spec.resources.gpu_milli == 1000
    assert spec.accepted_models == ("A100", "H100")
    assert spec.gang is not None and spec.gang.min_member == 4
    assert spec.elastic is not None and (spec.elastic.min, spec.elastic.max) == (2, 8)


def test_the_kafka_message_carries_the_same_schema_as_the_file() -> None:
    spec = JobSpec.model_validate(yaml.safe_load(JOB_YAML))
    wire = SubmitJob(spec=spec).model_dump_json(by_alias=True)
    decoded = CommandAdapter.validate_json(wire)
    assert isinstance(decoded, SubmitJob)
    assert decoded.spec == spec


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"resources": {"cpu": "lots"}}, "resources.cpu"),
        ({"resources": {"memory": "-3Gi"}}, "resources.memory"),
        ({"replicas": 0}, "replicas"),
        ({"id": "Not_A_Valid_ID!"}, "id"),
        ({"resources": {"gpu-share": "150%"}}, "resources.gpu-share"),
        ({"elastic": "8:2"}, "elastic"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_specs_fail_with_a_message_naming_the_field(patch: dict[str, object], field: str) -> None:
    data = {"id": "j1", "tenant": "t1", **patch}
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(data)
    locations = [".".join(str(p) for p in err["loc"]) for err in info.value.errors()]
    assert any(loc.startswith(field) for loc in locations), locations


def test_a_share_of_several_gpus_is_refused() -> None:
    with pytest.raises(ValidationError, match="fraction of one GPU"):
        JobSpec.model_validate(
            {"id": "j", "tenant": "t", "resources": {"nvidia.com/gpu": 2, "gpu-share": "50%"}}
        )


def test_a_gang_larger_than_the_job_is_refused() -> None:
    with pytest.raises(ValidationError, match="min-member"):
        JobSpec.model_validate({"id": "j", "tenant": "t", "replicas": 2, "gang": {"min-member": 3}})


def test_mig_requests_are_collected_from_kubernetes_resource_names() -> None:
    spec = JobSpec.model_validate({"id": "j", "tenant": "t", "resources": {"nvidia.com/mig-1g.10gb": 2}})
    assert spec.resources.mig == {"1g.10gb": 2}


def test_events_round_trip_through_the_discriminated_union() -> None:
    placed = JobPlaced(
        job_id="j1",
        bindings=[
            TaskBinding(task=0, node="n1", gpus=[0, 1], gpu_milli=1000, cpu_milli=8000, memory_mib=1024)
        ],
        policy="tessera",
        node_versions={"n1": 3},
    )
    rejected = JobRejected(job_id="j2", code="unknown-queue", reason="queue 'x' does not exist")
    for event in (placed, rejected):
        assert EventAdapter.validate_json(event.model_dump_json()) == event


def test_events_are_frozen_and_forbid_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        JobRejected.model_validate({"job_id": "j", "code": "invalid", "reason": "r", "extra": 1})


def test_an_admission_raising_a_job_to_an_unknown_class_is_refused_by_name() -> None:
    spec = JobSpec.model_validate(yaml.safe_load(JOB_YAML))
    raised = JobAdmitted(spec=spec, promoted_class="high")
    assert EventAdapter.validate_json(raised.model_dump_json()) == raised
    with pytest.raises(ValidationError, match="priority-class 'urgent' is unknown"):
        EventAdapter.validate_json(raised.model_dump_json().replace('"high"', '"urgent"'))


def test_schema_export_writes_one_valid_json_schema_per_model(tmp_path: Path) -> None:
    written = write_schemas(tmp_path)
    assert len(written) == len(MODELS)
    job = json.loads((tmp_path / "JobSpec.schema.json").read_text())
    assert "nvidia.com/gpu" in job["$defs"]["Resources"]["properties"]


@pytest.mark.parametrize(
    ("queue", "words"),
    [
        ({"name": "a", "guarantee": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 4}}, "guarantee"),
        (
            {
                "name": "p",
                "max": {"nvidia.com/gpu": 10},
                "children": [
                    {"name": "c1", "guarantee": {"nvidia.com/gpu": 6}},
                    {"name": "c2", "guarantee": {"nvidia.com/gpu": 6}},
                ],
            },
            "children's guarantees",
        ),
    ],
)
def test_a_queue_tree_whose_guarantees_could_never_be_honoured_is_refused(
    queue: dict[str, object], words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        QueueTreeSpec.model_validate({"queues": [queue]})


def test_a_spec_with_a_priority_class_reads_back_the_same_from_its_json() -> None:
    from schemas import SubmitJob
    from schemas.commands import CommandAdapter

    spec = JobSpec.model_validate({"id": "a", "tenant": "t", "priority-class": "best-effort"})
    assert spec.priority == -100
    again = CommandAdapter.validate_json(SubmitJob(spec=spec).model_dump_json(by_alias=True))
    assert isinstance(again, SubmitJob) and again.spec == spec


def test_preempt_after_reaches_the_core_and_child_queues_inherit_it() -> None:
    spec = QueueTreeSpec.model_validate(
        {
            "queues": [
                {
                    "name": "research",
                    "preempt-after": "24h",
                    "children": [{"name": "nlp"}, {"name": "vision", "preempt-after": "2h"}],
                },
                {"name": "inference"},
            ]
        }
    )
    after = queue_tree(spec).preempt_after_s  # what the preemption stage reads
    assert after == {"research": 86400.0, "nlp": 86400.0, "vision": 7200.0, "inference": None}
    # `tessera queue show` says what the core reads, inherited values included.
    view = ClusterView()
    view.queues = spec
    shown = {q.name: q.preempt_after_s for q in queue_usage(view)}
    assert shown == after


def test_large_jobs_reaches_the_core_child_queues_inherit_it_and_a_bad_one_is_refused_by_name() -> None:
    from shared.core.queues import LargeJobRule

    rule = {"min-gpus": 8, "priority-class": "high"}
    own = {"min-gpus": 16, "priority-class": "critical"}
    spec = QueueTreeSpec.model_validate(
        {
            "queues": [
                {
                    "name": "research",
                    "large-jobs": rule,
                    "children": [{"name": "nlp"}, {"name": "vision", "large-jobs": own}],
                },
                {"name": "inference"},
            ]
        }
    )
    tree = queue_tree(spec)
    high, critical = LargeJobRule(8, "high"), LargeJobRule(16, "critical")
    assert tree.large_jobs == {"research": high, "nlp": high, "vision": critical, "inference": None}
    assert tree.priority_of("nlp", 8, 0) == (100, high)
    assert tree.priority_of("nlp", 7.5, 0) == (0, None)  # smaller
    assert tree.priority_of("nlp", 64, 1000) == (1000, None)  # asks for more
    assert tree.priority_of("vision", 8, 0) == (0, None)  # its own rule starts at 16
    assert tree.priority_of("inference", 64, -100) == (-100, None)
    view = ClusterView()
    view.queues = spec
    assert {q.name: q.large_jobs for q in queue_usage(view)} == tree.large_jobs  # `tessera queue show`
    for bad, named in (
        ({"min-gpus": 8, "priority-class": "urgent"}, "urgent"),
        ({"min-gpus": 0, "priority-class": "high"}, "min-gpus"),
    ):
        with pytest.raises(ValidationError, match=named):
            QueueTreeSpec.model_validate({"queues": [{"name": "q", "large-jobs": bad}]})


DURATIONS = [(86400.0, "24h"), (5400.0, "90m"), (45.0, "45s"), (90.5, "90.5s")]


@pytest.mark.parametrize(("seconds", "text"), DURATIONS)
def test_a_duration_is_shown_as_the_shortest_text_that_reads_back_the_same(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text
    assert duration_s(text) == seconds
