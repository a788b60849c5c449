"""The CLI's own logic around the playbooks: init, bad input, reading runner events, reaching a node.

No hosts here (the lab tests drive `up`, `plan`, `status`, `logs` for real).
The runner events are written in ansible-runner's own shape.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from sparkplay.errors import BadInput, ExitCode
from sparkplay.inventory import Host, parse_nodes
from sparkplay.runner import RunResult, progress_of
from tests.conftest import PROJECT, run_cli


def test_init_writes_a_documented_inventory_and_asks_before_replacing(tmp_path: Path):
    inv = tmp_path / "pair"
    proc = run_cli("init", "-i", str(inv), "--node", "spark-a", "--node", "spark-b", "--user", "nvidia")
    assert proc.returncode == 0, proc.stderr
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    group = hosts["all"]["children"]["sparkplay_nodes"]
    assert group["hosts"] == {"spark-a": {"sparkplay_rank": 0}, "spark-b": {"sparkplay_rank": 1}}
    assert group["vars"] == {"ansible_become": True, "ansible_user": "nvidia"}
    knobs = (inv / "group_vars" / "sparkplay_nodes" / "main.yml").read_text()
    assert "# serve_bind:" in knobs and "# checkpoint_streams:" in knobs
    # the same again: nothing to ask
    assert run_cli("init", "-i", str(inv), "--node", "spark-a", "--node", "spark-b", "--user", "nvidia").returncode == 0
    # other nodes: no terminal, no --yes -> nothing replaced
    before = (inv / "hosts.yml").read_text()
    proc = run_cli("init", "-i", str(inv), "--node", "spark-b:0", "--node", "spark-a:1")
    assert proc.returncode == ExitCode.DECLINED
    assert (inv / "hosts.yml").read_text() == before
    proc = run_cli("init", "-i", str(inv), "--node", "spark-b:0", "--node", "spark-a:1", "--yes")
    assert proc.returncode == 0, proc.stderr
    (backup,) = (inv / ".sparkplay-backups").glob("hosts.yml.*")
    assert backup.read_text() == before


@pytest.mark.parametrize(
    ("specs", "says"),
    [
        ([], "no nodes"),
        (["spark-a", "spark-a"], "twice"),
        (["spark-a:1", "spark-b:2"], "valid layout"),
        (["spark a"], "not a host name"),
        (["spark-a:x"], "must be a number"),
    ],
)
def test_bad_node_lists_are_refused(specs: list[str], says: str):
    with pytest.raises(BadInput, match=says):
        parse_nodes(specs)


def test_bad_input_exits_2_before_anything_runs(tmp_path: Path):
    proc = run_cli("up", "no-such-recipe", "-i", str(tmp_path), "--yes")
    assert proc.returncode == ExitCode.BAD_INPUT and "no-such-recipe" in proc.stderr
    proc = run_cli("up", "lab-tiny", "-i", str(tmp_path / "missing"), "--yes")
    assert proc.returncode == ExitCode.BAD_INPUT and "does not exist" in proc.stderr
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    proc = run_cli("up", "lab-tiny", "-i", str(tmp_path), "--only", "everything", "--yes")
    assert proc.returncode == ExitCode.BAD_INPUT and "--only everything is not a step" in proc.stderr
    proc = run_cli("up", "lab-tiny", "-i", str(tmp_path), "--set", "nonsense=1", "--yes")
    assert proc.returncode == ExitCode.BAD_INPUT
    assert len(proc.stderr.strip().splitlines()) == 1


def test_bench_refuses_bad_input_in_one_line_before_anything_runs(tmp_path: Path):
    (tmp_path / "hosts.yml").write_text("all: {children: {sparkplay_nodes: {hosts: {a: {sparkplay_rank: 0}}}}}\n")
    profile = tmp_path / "p.yml"
    profile.write_text("concurency: [1, 2]\n")
    proc = run_cli("bench", "lab-tiny", "-i", str(tmp_path), "--profile", str(profile))
    assert proc.returncode == ExitCode.BAD_INPUT
    assert f"bench profile {profile} has unknown keys concurency" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("bench", "no-such-recipe", "-i", str(tmp_path))
    assert proc.returncode == ExitCode.BAD_INPUT and "unknown recipe 'no-such-recipe'" in proc.stderr
    proc = run_cli("bench", "-i", str(tmp_path))  # no recipe given, none recorded
    assert proc.returncode == ExitCode.BAD_INPUT and "pass the recipe: sparkplay bench RECIPE" in proc.stderr
    earlier = tmp_path / "earlier.json"
    earlier.write_text("{}")
    proc = run_cli("bench", "lab-tiny", "-i", str(tmp_path), "--compare", str(earlier))
    assert proc.returncode == ExitCode.BAD_INPUT and "holds no bench rows" in proc.stderr


def test_without_i_the_default_inventory_is_used_and_named_when_missing(tmp_path: Path):
    proc = run_cli("status", env={"SPARKPLAY_INVENTORY": str(tmp_path / "none")})
    assert proc.returncode == ExitCode.BAD_INPUT
    assert f"inventory {tmp_path / 'none'} does not exist" in proc.stderr and "sparkplay init" in proc.stderr


def event(kind: str, **data: object) -> dict:
    return {"event": kind, "event_data": data}


def test_run_result_reads_the_events_into_changes_failures_and_exit_codes():
    result = RunResult(status="failed")
    result.absorb(event("runner_on_ok", host="a", task="Write the unit", res={"changed": True}))
    result.absorb(event("runner_on_ok", host="a", task="Read", res={"changed": False}))
    result.absorb(event("runner_on_failed", host="b", task="Probe", ignore_errors=True, res={"msg": "fine"}))
    assert result.changes == {"a": ["Write the unit"]} and not result.failures
    result.absorb(
        event("runner_on_failed", host="b", task="Start", res={"msg": "boom", "stdout": "x\ny", "stderr": "z"})
    )
    result.absorb(event("playbook_on_stats", ok={"a": 2}, failures={"b": 1}, artifact_data={"sparkplay_status": []}))
    assert result.failures[0].output == ["x", "y", "z"]
    assert result.stats["b"]["failed"] == 1 and result.custom == {"sparkplay_status": []}
    assert result.exit_code == ExitCode.HOSTS_FAILED
    result.absorb(event("runner_on_unreachable", host="c", task="Gather", res={"msg": "no route"}))
    assert result.exit_code == ExitCode.HOSTS_UNREACHABLE
    assert RunResult(status="successful").exit_code == ExitCode.OK
    assert RunResult(status="canceled", interrupted=True).exit_code == ExitCode.FAILED


def test_progress_lines_are_read_for_the_bar():
    assert progress_of("rank1: 1.20 / 3.40 GB (35%), 0.85 GB/s, ETA 3 s") == (1.2, 3.4)
    assert progress_of("lab-tiny answers") is None


def test_a_node_is_reached_the_way_ansible_reaches_it():
    cmd = ["journalctl", "-u", "x"]
    lab = Host("sparkplay-lab-rank1", 1, {"ansible_connection": "community.docker.docker"})
    assert lab.shell_argv(cmd) == ["docker", "exec", "sparkplay-lab-rank1", *cmd]
    spark = Host("spark-b", 1, {"ansible_host": "10.0.0.2", "ansible_user": "nvidia", "ansible_become": True})
    assert spark.shell_argv(cmd) == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "nvidia@10.0.0.2",
        "--",
        "sudo",
        "-n",
        "-u",
        "root",
        *cmd,
    ]
    root = Host("spark-c", 2, {"ansible_port": 2222})
    assert root.shell_argv(cmd) == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "spark-c", "--", *cmd]


def test_a_followed_checkpoint_sync_shows_as_a_progress_line():
    """The role follows `sparkplay-ckpt progress` with until/retries; each retry carries the sync's bytes."""
    import io
    import json

    from rich.console import Console

    from sparkplay.cli_display import RunDisplay

    out = io.StringIO()
    status = {
        "phase": "sending",
        "finished": False,
        "bytes_done": 1.2e9,
        "bytes_total": 3.4e9,
        "rate_bps": 0.6e9,
        "eta_s": 4.0,
    }
    with RunDisplay(Console(file=out, width=200), "up", live=False) as display:
        display({"event": "playbook_on_task_start", "event_data": {"task": "Checkpoint | Follow the sync"}})
        display({"event": "runner_retry", "event_data": {"host": "rank1", "res": {"stdout": json.dumps(status)}}})
        display({"event": "runner_retry", "event_data": {"host": "rank1", "res": {"stdout": "not json"}}})
    assert "progress     rank1: 1.20 / 3.40 GB (35%), 0.60 GB/s, ETA 4 s" in out.getvalue()
    assert list(display.bars) == ["rank1"]


def test_logs_honour_the_inventorys_key_ssh_arguments_and_become_method():
    import pytest

    from sparkplay.errors import BadInput

    cmd = ["journalctl"]
    spark = Host(
        "spark-a",
        0,
        {
            "ansible_user": "me",
            "ansible_ssh_private_key_file": "~/.ssh/spark",
            "ansible_ssh_common_args": "-o ProxyJump=bastion -o 'User Known=x'",
            "ansible_become": "yes",
            "ansible_become_method": "community.general.doas",
            "ansible_become_user": "svc",
        },
    )
    ssh = ["ssh", "-o", "BatchMode=yes", "-i", "~/.ssh/spark", "-o", "ProxyJump=bastion", "-o", "User Known=x"]
    assert spark.shell_argv(cmd) == [*ssh, "me@spark-a", "--", "doas", "-n", "-u", "svc", *cmd]
    su = Host("spark-b", 1, {"ansible_user": "me", "ansible_become": True, "ansible_become_method": "su"})
    with pytest.raises(BadInput, match="with su, which asks for a password"):
        su.shell_argv(cmd)
    local = Host("me", 0, {"ansible_connection": "winrm"})
    with pytest.raises(BadInput, match="uses connection winrm"):
        local.shell_argv(cmd)


def test_tables_keep_whole_names_when_output_is_not_a_terminal():
    from tests.conftest import run_cli

    proc = run_cli("recipe", "list", env={"COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    assert "Lab: a tiny generated llama model on llama.cpp, layers spread over the ranks by RPC" in proc.stdout
    assert "…" not in proc.stdout


def test_end_of_input_at_a_question_is_a_no_with_exit_3(monkeypatch):
    """Ctrl-D at the prompt: click raises Abort; sparkplay answers no (Declined, exit 3), not exit 1."""
    import click
    import pytest

    from sparkplay import cli_common, cli_run
    from sparkplay.errors import Declined, ExitCode

    def eof(*_args, **_kwargs):
        raise click.exceptions.Abort()

    monkeypatch.setattr(cli_common.typer, "confirm", eof)
    monkeypatch.setattr(cli_run.sys.stdin, "isatty", lambda: True)
    assert cli_common.confirm("Go?") is False
    with pytest.raises(Declined) as exc:
        cli_run.ask("Go?", False, "no terminal", "add --yes")
    assert exc.value.exit_code == ExitCode.DECLINED


def test_metrics_prints_a_scrape_configuration_and_says_when_it_binds_loopback(tmp_path):
    proc = run_cli("metrics", "-i", "inventory/sample", "glm53")
    assert proc.returncode == 0, proc.stderr
    assert "listen on spark-a's loopback only" in proc.stdout
    config = yaml.safe_load(proc.stdout)
    jobs = {job["job_name"]: job["static_configs"][0] for job in config["scrape_configs"]}
    assert jobs["sparkplay-engine"]["targets"] == ["127.0.0.1:8000"]
    assert jobs["sparkplay-watchdog"]["targets"] == ["127.0.0.1:9899"]
    assert jobs["sparkplay-engine"]["labels"] == {"recipe": "glm53", "engine": "vllm", "host": "spark-a"}
    inventory = tmp_path / "inv"
    shutil.copytree(PROJECT / "inventory" / "sample", inventory)
    with (inventory / "group_vars" / "sparkplay_nodes" / "main.yml").open("a") as fh:
        fh.write("serve_bind: 0.0.0.0\nserve_watchdog_metrics_bind: 0.0.0.0\nserve_watchdog_metrics_port: 9100\n")
    wide = yaml.safe_load(run_cli("metrics", "-i", str(inventory), "glm53").stdout)
    targets = [job["static_configs"][0]["targets"][0] for job in wide["scrape_configs"]]
    host = yaml.safe_load((inventory / "hosts.yml").read_text())
    assert all(not t.startswith("127.0.0.1") for t in targets) and targets[1].endswith(":9100"), (targets, host)
