from pathlib import Path

import pytest

from shared.sim.trace import TraceError, load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[2] / "loadtests" / "traces" / "alibaba-gpu-v2023"


def test_the_shipped_openb_cluster_has_its_published_size() -> None:
    all_nodes = load_nodes(TRACES / "openb_node_list_all_node.csv")
    gpu_nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    assert len(all_nodes) == 1523 and len(gpu_nodes) == 1213
    assert sum(n.gpu_count for n in all_nodes) == sum(n.gpu_count for n in gpu_nodes) == 6212


def test_a_pod_list_with_only_the_first_five_columns_takes_defaults(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,4000,8192,1,500\np1,2000,1024,0,0\n")
    pods = load_pods(path)
    assert [p.shape.gpu_milli for p in pods] == [500, 0]
    assert pods[0].creation_time == 0.0 and pods[0].deletion_time is None and pods[0].shape.gpu_models == ()


def test_gpu_spec_lists_accepted_models_separated_by_bars(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np0,1,1,1,1000,V100M16|V100M32\np1,1,1,1,1000,\n"
    )
    pods = load_pods(path)
    assert pods[0].shape.gpu_models == ("V100M16", "V100M32")
    assert pods[1].shape.gpu_models == ()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("p1,abc,1,0,0", "'cpu_milli': 'abc' is not a number"),
        ("p1,1000,1,-2,0", "is negative"),
        ("p1,1000,1,2,500", "take them whole"),
        ("p1,1000,1,1,0", "gpu_milli=0"),
    ],
)
def test_a_malformed_row_is_reported_with_its_line_number(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1,0,0\n" + row + "\n")
    with pytest.raises(TraceError, match=message) as info:
        load_pods(path)
    assert info.value.line == 3
    assert f"{path}:3:" in str(info.value)


def test_a_missing_required_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu\np0,1,1,0\n")
    with pytest.raises(TraceError, match="gpu_milli"):
        load_pods(path)
