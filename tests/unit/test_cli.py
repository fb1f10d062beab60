import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.cli import stack
from shared.cli.main import app, main
from shared.cli.simulate import parse_seeds

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PHILLY = Path(__file__).resolve().parents[2] / "loadtests" / "traces" / "philly"

runner = CliRunner()


def _tiny_trace(tmp: Path) -> tuple[Path, Path]:
    nodes = tmp / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},32000,65536,4,T4\n" for i in range(8))
    )
    pods = tmp / "pods.csv"
    rows = [f"p{i},{2000 + 1000 * (i % 3)},2048,1,{[1000, 500, 250][i % 3]}\n" for i in range(60)]
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(rows))
    return nodes, pods


def test_simulate_takes_scorer_options_and_refuses_one_a_policy_lacks(tmp_path: Path) -> None:
    nodes, pods = _tiny_trace(tmp_path)
    base = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1", "--workers", "1"]
    out = tmp_path / "out"
    knobs = ["--scorer-options", '{"scarcity": false}', "--out", str(out)]
    result = runner.invoke(app, [*base, "--policy", "tessera", *knobs])
    assert result.exit_code == 0, result.output
    assert 'scorer options: {"scarcity": false}' in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["policies"]) == {"tessera"} and summary["scorer_options"] == {"scarcity": False}
    refused = runner.invoke(app, [*base, "--policy", "fgd,tessera", *knobs])
    said = " ".join(refused.output.replace("│", " ").split())  # the error box may wrap anywhere
    assert refused.exit_code == 2 and "policy 'fgd' options: scarcity" in said
    assert runner.invoke(app, [*base, "--policy", "tessera", "--scorer-options", "[1]"]).exit_code == 2


def test_parse_seeds_accepts_ranges_and_lists() -> None:
    assert parse_seeds("42-44") == [42, 43, 44]
    assert parse_seeds("1,5-6,1") == [1, 5, 6]


def test_simulate_writes_the_summary_curves_and_figure(tmp_path: Path) -> None:
    nodes, pods = _tiny_trace(tmp_path)
    out = tmp_path / "out"
    args = [
        "simulate",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--policy",
        "fgd,bestfit,tessera",
        "--seeds",
        "1-2",
        "--mode",
        "fill",
        "--out",
        str(out),
        "--workers",
        "1",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "fill" and summary["seeds"] == [1, 2] and summary["trace"] == "pods"
    assert set(summary["policies"]) == {"fgd", "bestfit", "tessera"}
    for row in summary["policies"].values():
        assert set(row["alloc"]) == {"90", "95", "100", "130"}
        assert 0 <= row["alloc"]["100"] <= 100 and row["frag_amount_80"] >= 0
    lines = (out / "curves.csv").read_text().splitlines()
    assert lines[0] == "policy,seed,arrived,alloc,frag_amount,frag_ratio"
    assert len(lines) == 1 + 3 * 2 * 131
    assert (out / "allocation.png").stat().st_size > 10_000


def test_timeline_mode_reports_waits_and_utilisation(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,16384,1,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time\n"
        "a,1000,1024,1,1000,,LS,Running,0,100\n"
        "b,1000,1024,1,1000,,LS,Running,10,20\n"
    )
    out = tmp_path / "tl"
    args = [
        "simulate",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--policy",
        "fifo,tessera",
        "--mode",
        "timeline",
        "--out",
        str(out),
        "--workers",
        "1",
        "--compress",
        "1",  # as the trace says: not replayed faster, no node sample
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "timeline" and set(summary["policies"]) == {"fifo", "tessera"}
    row = summary["policies"]["fifo"]
    # b waits for a's only GPU: from t=10 until a leaves at t=100; median of (0, 90) is 45.
    assert row["wait_p50_s"]["1"] == 45.0 and row["unfinished"] == 0
    assert row["wait_p95_s"]["8"] is None  # no job of that size
    assert row["avg_jct_s"] == (100 + 100) / 2  # a: 0..100, b: 10..110
    assert summary["per_seed"]["fifo"]["42"] == row  # one seed: its figures are the median
    assert (out / "utilisation.png").exists() and (out / "waits.png").exists()
    # The tables fit a terminal of 80 columns without cutting a policy's name or a figure.
    assert "fifo" in result.output and "tessera" in result.output and "…" not in result.output
    assert "waiting" in result.output and "window" in result.output


def test_a_malformed_trace_exits_with_its_line_number(tmp_path: Path) -> None:
    nodes, pods = _tiny_trace(tmp_path)
    pods.write_text(pods.read_text() + "bad,notanumber,1,0,0\n")
    result = runner.invoke(
        app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "pods.csv:62" in result.output


def test_an_unknown_policy_is_refused_with_the_choices() -> None:
    result = runner.invoke(app, ["simulate", "--policy", "magic"])
    assert result.exit_code != 0
    assert "tessera" in result.output


def test_an_arrival_jitter_is_refused_when_negative_or_without_philly(tmp_path: Path) -> None:
    philly = ["--philly", str(tmp_path), "--mode", "timeline"]
    result = runner.invoke(app, ["simulate", *philly, "--arrival-jitter", "-1"])
    assert result.exit_code != 0
    assert "--arrival-jitter >= 0" in result.output
    result = runner.invoke(app, ["simulate", "--mode", "timeline", "--arrival-jitter", "30"])
    assert result.exit_code != 0
    assert "only a Philly workload" in result.output


def test_schema_command_writes_json_schemas(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema", "--out", str(tmp_path)])
    assert result.exit_code == 0
    assert (tmp_path / "JobSpec.schema.json").exists()


def test_tessera_up_gives_each_placement_worker_its_own_share_of_the_nodes() -> None:
    from shared.cli.stack import service_commands

    commands = service_commands(3, "process", None, None, 1.0, "tessera")
    shards = [
        argv[argv.index("--shard") + 1] for name, argv in commands.items() if name.startswith("placement")
    ]
    assert shards == ["0/3", "1/3", "2/3"]
    alone = service_commands(1, "process", None, None, 1.0, "tessera")["placement-1"]
    assert "--shard" not in alone


def test_status_with_postgresql_out_of_reach_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """No traceback: the server, its address and what to try, exit status 1."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://tessera@127.0.0.1:1/tessera")  # nothing listens
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 1
    out = " ".join(result.output.split())
    assert "cannot reach PostgreSQL at 127.0.0.1:1/tessera" in out and "tessera infra up" in out
    assert "Traceback" not in result.output


def test_submit_with_kafka_out_of_reach_says_so_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's submission does not sit out a service's 30 s wait for the broker: the CLI waits
    ``TESSERA_CLI_REACH_S`` and names the server it could not reach."""
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # nothing listens
    monkeypatch.setenv("TESSERA_CLI_REACH_S", "0.5")
    began = time.monotonic()
    result = runner.invoke(app, ["submit", str(EXAMPLES / "train-small.yaml")])
    assert result.exit_code == 1
    out = " ".join(result.output.split())
    assert "cannot reach Kafka at 127.0.0.1:1" in out and "Nothing was changed" in out
    assert time.monotonic() - began < 10.0


def test_a_demo_deletes_only_earlier_demos_topics() -> None:
    from shared.cli.demo import earlier_demo

    assert earlier_demo("demo015535.events", "demo101010")
    assert earlier_demo("demo015535.submissions", "demo101010")
    assert not earlier_demo("demo101010.events", "demo101010")  # this demo's own
    assert not earlier_demo("tessera.events", "demo101010")  # the stack's
    assert not earlier_demo("demolition.events", "demo101010")
    assert not earlier_demo("e2eabc.events", "demo101010")


def test_a_bad_setting_is_said_in_one_line_naming_its_variable_not_in_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TESSERA_LEASE_S", "-1")
    monkeypatch.setattr("sys.argv", ["tessera", "status"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 2
    out = capsys.readouterr().out
    assert "TESSERA_LEASE_S: Input should be greater than 0" in out and "Traceback" not in out


def test_a_service_that_exits_is_seen_at_once_with_the_last_line_of_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``tessera up`` reads while it waits for the services: a started child that exits is
    reaped (a zombie still answers ``kill(pid, 0)``), and its log's last line says why."""
    monkeypatch.setattr(stack, "LOGS", tmp_path)
    why = 'InvalidCatalogNameError: database "x" does not exist'
    (tmp_path / "relay.log").write_text(f"Traceback...\n  ...\n{why}\n\n")
    assert stack.last_error("relay") == why
    assert stack.last_error("absent") == "(no log)"
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.time() + 10
        while not stack.exited(quick.pid):
            assert time.time() < deadline, "an exited child was not seen"
            time.sleep(0.05)
        assert not stack.exited(slow.pid)
    finally:
        slow.kill()
        slow.wait()


def test_up_starts_only_the_servers_that_are_the_projects_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.settings import Settings

    for var in ("TESSERA_PG_PORT", "TESSERA_KAFKA_PORT", "DATABASE_URL", "KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(var, raising=False)
    assert stack.own_servers(Settings()) == {"postgres.sh": True, "kafka.sh": True}  # the defaults
    elsewhere = Settings(
        DATABASE_URL="postgresql://u@db.example:5432/t", KAFKA_BOOTSTRAP_SERVERS="10.0.0.5:9092"
    )
    assert stack.own_servers(elsewhere) == {"postgres.sh": False, "kafka.sh": False}
    other_port = Settings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9092,127.0.0.1:9093")
    assert stack.own_servers(other_port) == {"postgres.sh": True, "kafka.sh": False}
    monkeypatch.setenv("TESSERA_PG_PORT", "25432")  # the script would run it on another port
    assert not stack.own_servers(Settings())["postgres.sh"]


def test_requeue_at_creation_puts_an_evicted_job_back_ahead_of_later_ones(tmp_path: Path) -> None:
    """One GPU: best-effort ``a`` runs from 0 s, best-effort ``b`` waits from 5 s, high-priority
    ``c`` comes at 700 s and evicts ``a`` (``b``'s reservation yields to it).  When ``c`` ends at
    750 s, ``b`` goes first by default (``a``'s wait began at its eviction), ``a`` with
    ``--requeue-at creation`` (it was submitted first)."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,16384,1,T4\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time\n"
        "a,1000,1024,1,1000,,BE,Running,0,5000\n"
        "b,1000,1024,1,1000,,BE,Running,5,15\n"
        "c,1000,1024,1,1000,,LS,Running,700,750\n"
    )
    jct: dict[str, float] = {}
    for requeue in ("eviction", "creation"):
        out = tmp_path / requeue
        args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "tessera"]
        args += ["--mode", "timeline", "--out", str(out), "--workers", "1", "--compress", "1"]
        result = runner.invoke(app, [*args, "--requeue-at", requeue])
        assert result.exit_code == 0, result.output
        summary = json.loads((out / "summary.json").read_text())
        assert summary.get("requeue_at") == (None if requeue == "eviction" else "creation")
        row = summary["policies"]["tessera"]
        assert row["preemptions"] == 1
        jct[requeue] = row["avg_jct_s"]
    # eviction: a 0..5760, b 5..760, c 700..750; creation: a 0..5750, b 5..5760, c 700..750.
    assert jct["eviction"] == round((5760 + 755 + 50) / 3, 1)
    assert jct["creation"] == round((5750 + 5755 + 50) / 3, 1)


def test_the_order_within_and_declared_durations_are_refused_where_they_cannot_apply(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--order-within", "response-ratio"])
    assert result.exit_code != 0
    assert "a timeline run's order" in result.output
    result = runner.invoke(app, ["simulate", "--mode", "timeline", "--declared-durations", "1"])
    assert result.exit_code != 0
    assert "a Philly timeline run's error" in result.output
    philly = ["simulate", "--mode", "timeline", "--philly", str(tmp_path), "--declared-durations=-1"]
    result = runner.invoke(app, philly)
    assert result.exit_code != 0
    assert "Invalid value for --declared-durations" in result.output


def test_requeue_at_is_refused_outside_a_timeline(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--requeue-at", "creation"])
    assert result.exit_code != 0
    assert "only a timeline run evicts" in result.output


def test_drawn_run_times_are_refused_without_philly_and_a_bad_list_names_its_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--mode", "timeline", "--runtimes", str(tmp_path / "r.csv")])
    assert result.exit_code != 0
    assert "only a Philly workload draws run times" in result.output
    bad = tmp_path / "r.csv"
    bad.write_text("runtime\n12\nsoon\n")
    philly = ["--philly", str(PHILLY / "gavel-derived-per-vc-seed0"), "--mode", "timeline"]
    result = runner.invoke(app, ["simulate", *philly, "--runtimes", str(bad), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "r.csv:3:" in result.output


def test_a_large_class_and_preempt_after_are_checked_and_act_only_in_a_timeline(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "--large-class", "high"])
    assert result.exit_code != 0
    assert "add --mode timeline" in result.output
    timeline = ["simulate", "--mode", "timeline"]
    result = runner.invoke(app, [*timeline, "--large-class", "urgent"])
    assert result.exit_code != 0
    assert "--large-class: choose from critical, high, normal," in result.output
    result = runner.invoke(app, [*timeline, "--preempt-after", "a day"])
    assert result.exit_code != 0
    assert "not a duration" in result.output
    for knobs in (["--large-class", "high", "--large-gpus", "0"], ["--large-gpus", "16"]):
        result = runner.invoke(app, [*timeline, *knobs])
        assert result.exit_code != 0
        assert "a positive number, with --large-class" in result.output  # never silently ignored
    # A run records the rule (8 GPUs unless told) and how many jobs it raised: here the one
    # 8-GPU pod of a best-effort qos, not the 1-GPU one, nor the 8-GPU pod already of class high.
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time\n"
        "small,1000,1024,1,1000,,BE,Running,0,100\n"
        "big,1000,1024,8,1000,,BE,Running,10,20\n"
        "ls,1000,1024,8,1000,,LS,Running,30,40\n"
    )
    out = tmp_path / "large"
    files = ["--nodes", str(nodes), "--pods", str(pods), "--compress", "1", "--workers", "1"]
    result = runner.invoke(app, [*timeline, *files, "--large-class", "high", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["large_class"] == {"class": "high", "min_gpus": 8.0}
    assert summary["notes"]["promoted_jobs"] == 1


def test_the_queue_table_keeps_names_and_columns_whole_at_80_columns_and_says_the_rules_below() -> None:
    import io

    from rich.console import Console

    from schemas.queues import QueueTreeSpec
    from shared.cli.main import queue_table
    from shared.state.fold import ClusterView

    def rendered(tree: dict[str, object]) -> str:
        view = ClusterView()
        view.queues = QueueTreeSpec.model_validate(tree)
        out = io.StringIO()
        Console(file=out, width=80).print(queue_table(view, 80))
        return "\n".join(" ".join(line.split(" ")) for line in out.getvalue().splitlines())

    rule = {"min-gpus": 8, "priority-class": "high"}
    child = {"name": "vision-research", "preempt-after": "24h"}
    text = rendered({"queues": [{"name": "organisation", "large-jobs": rule, "children": [child]}]})
    header = ["queue", "guarantee", "max", "deserved", "used", "borrowed", "pending", "running"]
    assert header in [line.split() for line in text.splitlines()] and "…" not in text
    assert "\norganisation " in text and "\n  vision-research " in text  # whole, indented under its parent
    # The parent's class is inherited: listed for both; the child's own wait for the child only.
    assert "jobs of >= 8 GPUs run at least at high: organisation, vision-research" in text
    assert "jobs waiting 24h may preempt lower-priority work: vision-research" in text
    # A name too long for the line is folded, never cut, and every figure's column stays.
    text = rendered({"queues": [{"name": "a-rather-long-team-queue-name"}]})
    assert header in [line.split() for line in text.splitlines()] and "…" not in text
    assert "a-rather-long-team-queue-name" in "".join(line.split(" ")[0] for line in text.splitlines())
    assert "run at least" not in rendered({"queues": [{"name": "a"}]})


def test_the_queue_table_names_jobs_the_applied_tree_bars() -> None:
    import io

    from rich.console import Console

    from schemas import JobSpec
    from schemas.events import JobAdmitted, QueuesApplied
    from schemas.queues import QueueTreeSpec
    from shared.cli.main import queue_table
    from tests.folded_log import Log

    log = Log()
    log.add(
        "queues", QueuesApplied(tree=QueueTreeSpec.model_validate({"queues": [{"name": "a"}, {"name": "b"}]}))
    )
    for job, queue in (("j1", "b"), ("j2", "b"), ("j3", "a")):
        spec = JobSpec.model_validate(
            {"id": job, "tenant": "t", "queue": queue, "resources": {"nvidia.com/gpu": 1}}
        )
        log.add(f"job-{job}", JobAdmitted(spec=spec))

    def rendered() -> str:
        out = io.StringIO()
        Console(file=out, width=200).print(queue_table(log.view))
        return " ".join(out.getvalue().split())  # the caption wraps at the table's width

    assert "QueueGone" not in rendered()
    log.add("queues", QueuesApplied(tree=QueueTreeSpec.model_validate({"queues": [{"name": "a"}]})))
    assert (
        "jobs the applied tree bars (the pending ones wait for a tree that lets them in): "
        "QueueGone: queue 'b' is not in the queue tree (2 pending, 0 running)"
    ) in rendered()


def test_queue_apply_warns_of_jobs_the_new_tree_bars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from schemas import JobSpec
    from schemas.events import JobAdmitted, QueuesApplied
    from schemas.queues import QueueTreeSpec
    from tests.folded_log import Log

    log = Log()
    log.add(
        "queues", QueuesApplied(tree=QueueTreeSpec.model_validate({"queues": [{"name": "a"}, {"name": "b"}]}))
    )
    spec = JobSpec.model_validate(
        {"id": "j", "tenant": "t", "queue": "b", "resources": {"nvidia.com/gpu": 1}}
    )
    log.add("job-j", JobAdmitted(spec=spec))
    applied: list[QueueTreeSpec] = []

    async def read_view() -> tuple[object, dict[str, str]]:
        return log.view, {}

    async def apply_queues(tree: QueueTreeSpec) -> None:
        applied.append(tree)

    monkeypatch.setattr(stack, "read_view", read_view)
    monkeypatch.setattr(stack, "apply_queues", apply_queues)
    tree_file = tmp_path / "queues.yaml"
    tree_file.write_text("queues:\n  - name: a\n")
    result = runner.invoke(app, ["queue", "apply", str(tree_file)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert (
        "QueueGone: queue 'b' is not in the queue tree; 0 such job(s) running run on, 1 pending wait "
        "until a tree lets them in"
    ) in said
    assert [t.walk()[0][1].name for t in applied] == ["a"]  # applied all the same
    dry = runner.invoke(app, ["queue", "apply", "--dry-run", str(tree_file)])
    assert dry.exit_code == 0 and "QueueGone: queue 'b'" in " ".join(dry.output.split())
    assert "not applied (--dry-run)" in dry.output and len(applied) == 1
    tree_file.write_text("queues:\n  - name: a\n  - name: b\n    tenants: [ml]\n")
    result = runner.invoke(app, ["queue", "apply", str(tree_file)])
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "QueueGone" not in said
    assert "TenantBarred: tenant 't' is no longer allowed on queue 'b'; 0 such job(s) running" in said
    tree_file.write_text("queues:\n  - name: a\n  - name: b\n")
    result = runner.invoke(app, ["queue", "apply", str(tree_file)])
    assert result.exit_code == 0 and "wait until" not in result.output
