"""lab-tiny on the real lab: llama.cpp serving a generated model across two ranks, by the CLI and by the playbooks.
Marked `lab`.

Everything is real: the sparkplay CLI driving ansible-runner, the units under systemd in both nodes, llama.cpp from
Debian, the RPC traffic over the simulated cable, the completions. Nothing stands in for anything here. The tests run
in file order on one lab, from the provisioned nodes' snapshot: the last one locks the stack; the module's teardown
leaves lab-tiny served, unlocked, for tests/test_several_lab.py (one serving lab shared, issue 52). What a served lab
lives through besides the faults make test runs (plan on the served lab, a foreign file, a port taken by another
program, a stopped worker, the watchdog, rollback, drift, reset, the bench, each importer's plan) is in
tests/test_stack_lab.py (`make test-stack`).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import yaml

from sparkplay import varsfile
from sparkplay.engines.systemd import env_file, sandbox
from tests.conftest import PROJECT, provisioned_lab, run_cli
from tests.serving import (
    LOCK,
    NCCL,
    RPC_SERVER,
    UNIT,
    ask,
    held,
    journal,
    stand_in_nccl,
    status,
    unit,
    up,
    wait_answer,
)
from tests.steps import run_step
from tests.test_lab import in_node
from tests.test_provision_lab import playbook, recap

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("lab_host")]


@pytest.fixture(scope="module", autouse=True)
def served_lab(request: pytest.FixtureRequest) -> Iterator[None]:
    """The provisioned nodes' snapshot (tests/conftest.py): `up` from bare nodes is the installed command's
    test (tests/test_install_bare_lab.py), provisioning's own tests/test_provision_lab.py. When every test here
    passed and lab-tiny still answers, the lab is left serving it, unlocked, for test_several_lab."""
    failed = request.session.testsfailed

    def hand_on() -> str | None:
        if request.session.testsfailed != failed or not ask():
            return None
        LOCK.unlink(missing_ok=True)  # the last test locked the stack: the next module serves beside lab-tiny, unlocked
        return "lab-tiny"

    with provisioned_lab(hand_on):
        yield


def node_config(rank: int) -> str:
    """Every file under /etc/sparkplay and systemd's unit folder on RANK, with its size and time."""
    return in_node(rank, "sh", "-c", "ls -l --full-time /etc/sparkplay /etc/systemd/system 2>&1").stdout


def test_up_without_a_terminal_or_yes_changes_nothing():
    before = [node_config(rank) for rank in (0, 1)]
    proc = up()
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr
    assert "no terminal to ask on: nothing was changed" in proc.stderr
    assert "plan: sparkplay-lab-rank0:" in proc.stdout  # it showed what it would have done
    assert [node_config(rank) for rank in (0, 1)] == before
    assert in_node(0, "test", "-e", f"/etc/systemd/system/{UNIT}", check=False).returncode == 1  # nothing served
    assert not (PROJECT / "inventory" / "lab" / "group_vars" / "all" / "sparkplay.yml").exists()


def test_up_yes_from_a_fresh_lab_serves_across_both_ranks():
    # "fresh": provisioned nodes that serve nothing yet
    proc = up("--yes")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
    assert re.search(r"lab-tiny answers at http://127\.0\.0\.1:9931 after [\d.]+ s: What is 17\*23\? -> ", proc.stdout)
    assert re.search(r"up lab-tiny: successful", proc.stdout)
    chosen = yaml.safe_load((PROJECT / "inventory" / "lab" / "group_vars" / "all" / "sparkplay.yml").read_text())
    assert chosen["sparkplay_recipe"] == "lab-tiny"
    answer = ask()
    assert answer and answer["choices"][0]["message"]["content"]
    again = ask()
    assert again and again["choices"][0]["message"]["content"] == answer["choices"][0]["message"]["content"]  # greedy
    # the model's layers live on rank 1's RPC backend: the leader says so, and rank 1 allocated them
    leader = journal(0)
    assert "offloaded 5/5 layers" in leader
    size = re.search(r"RPC0\[192\.168\.100\.11:50052\] model buffer size =\s+([\d.]+) MiB", leader).group(1)
    assert f"[alloc_buffer] device: 0, size: {size} MiB" in journal(1)
    # the model was mirrored to rank 1 as a staged checkpoint, verified there
    marker = json.loads(in_node(1, "cat", "/var/lib/sparkplay/models/lab-tiny/.sparkplay/complete.json").stdout)
    assert marker["files"] == 2  # the model and its tokenizer.json
    # the API stays on loopback, the worker's RPC on the cable address only
    assert "127.0.0.1:9931" in in_node(0, "ss", "-Htln").stdout
    listening = in_node(1, "ss", "-Htln").stdout
    assert "192.168.100.11:50052" in listening and "0.0.0.0:50052" not in listening
    env = in_node(0, "stat", "-c", "%a", "/etc/sparkplay/serve.env").stdout.strip()
    assert env == "600"
    for rank in (0, 1):
        assert in_node(rank, "systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"


# The molecule `lab` scenario, folded into this lab (issue 52): its converge is the `up` above plus a second
# checkpoint staged beside the model, its idempotence a whole-site run that changes nothing, its verify every
# role scenario's testinfra checks (roles/*/molecule/default/tests; those that hold only after their own role's
# converge, such as stop's, skip themselves) against these nodes. `make molecule` still runs the `lab` scenario
# on a lab of its own, `make molecule-roles` every role's.
SCENARIO_CHECKS = sorted(str(p.relative_to(PROJECT)) for p in (PROJECT / "roles").glob("*/molecule/*/tests"))
GEN = ("--large", "2", "--large-mb", "70", "--small", "20")
TESTINFRA = ("-p", "no:cacheprovider", "-o", "addopts=", "-q", "--tb=short", "--hosts=ansible://sparkplay_nodes")
TESTINFRA += (f"--ansible-inventory={PROJECT / 'inventory' / 'lab' / 'hosts.yml'}",)
SITE_VARS = json.dumps(
    {
        "recipe": "lab-tiny",
        "checkpoint_staged": [
            {"name": "lab-tiny", "staged": "/var/lib/sparkplay/models/lab-tiny"},
            {"name": "lab-gen", "staged": "/var/lib/sparkplay/models/lab-gen"},
        ],
    }
)


def test_the_whole_site_converges_then_changes_nothing_and_every_scenarios_checks_hold():
    """The second and third runs of the serve role after `up` (the converge and the idempotence run) restart
    nothing, and the third changes nothing: a probe of a running worker's port (one client at a time) once sat
    in its accept queue, and the third run hung (issue 52 folded the serve.yml-alone runs that showed it)."""
    before = [unit(rank, "MainPID")["MainPID"] for rank in (0, 1)]
    # molecule/lab/prepare.yml's checkpoint-like tree on rank 0, as the scenario makes it
    maker = (PROJECT / "molecule" / "lab" / "files" / "make_checkpoint.py").read_bytes()
    subprocess.run(
        ["docker", "exec", "-i", "sparkplay-lab-rank0", "python3", "-", "/var/lib/sparkplay/models/lab-gen", *GEN],
        input=maker,
        capture_output=True,
        check=True,
        timeout=300,
    )
    converge = playbook("site.yml", "-e", SITE_VARS)
    assert converge.returncode == 0, converge.stdout[-4000:]
    again = playbook("site.yml", "-e", SITE_VARS)
    assert again.returncode == 0, again.stdout[-4000:]
    changed = {host: counts["changed"] for host, counts in recap(again.stdout).items()}
    assert changed == {"sparkplay-lab-rank0": 0, "sparkplay-lab-rank1": 0}, again.stdout[-4000:]
    assert [unit(rank, "MainPID")["MainPID"] for rank in (0, 1)] == before
    checks = run_step(
        [sys.executable, "-m", "pytest", *TESTINFRA, *SCENARIO_CHECKS],
        step="testinfra: every molecule scenario's checks on the served lab",
        budget=300,
    )
    assert checks.returncode == 0, checks.stdout[-4000:] + checks.stderr[-2000:]
    summary = re.search(r"(\d+) passed", checks.stdout)
    assert summary and int(summary.group(1)) >= 30 and "failed" not in checks.stdout.splitlines()[-1], checks.stdout


def test_plan_json_is_the_deployment_the_lab_runs_field_for_field():
    """`plan --json` asks the nodes for their facts and prints both stages: each rank's command line, env,
    units, record and probe are compared here with what the nodes hold and answer."""
    from sparkplay.engines.systemd import exec_line

    proc = run_cli("plan", "lab-tiny", "-i", "inventory/lab", "--json")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    planned = json.loads(proc.stdout)
    launch = planned["launch"]
    assert planned["leader"] == "sparkplay-lab-rank0" and launch["engine"] == "llamacpp"
    for rank in launch["ranks"]:
        r = rank["rank"]
        unit_file = in_node(r, "cat", f"/etc/systemd/system/{launch['unit']}").stdout
        assert f"\nExecStart={exec_line(rank['start'])}\n" in unit_file
        assert " ".join(rank["start"]) in unit(r, "ExecStart")["ExecStart"]  # what systemd parsed from it
        assert in_node(r, "cat", launch["env_file"]).stdout == env_file(rank["env"], launch["runtime"])
        kept = json.loads(in_node(r, "cat", planned["paths"]["serve_record"]).stdout)
        # the record is the plan's, plus the rank's memory claim the serve role's admission worked out
        assert {k: v for k, v in kept.items() if k != "claim"} == rank["record"]
        assert kept["claim"]["bytes"] > 0 and "KV cache" in kept["claim"]["how"]
        for name in rank["units"]:
            assert in_node(r, "systemctl", "is-enabled", name, check=False).stdout.strip() == "enabled", name
        others = set(planned["units"].values()) - set(rank["units"])
        for name in others:
            assert in_node(r, "test", "-e", f"/etc/systemd/system/{name}", check=False).returncode == 1, name
        assert rank["mounts"] == []  # native llama.cpp: no container
    probe = launch["probe"]
    models = json.loads(in_node(0, "curl", "-s", "-m", "10", probe["url"] + "/v1/models").stdout)
    assert probe["model"] in [m["id"] for m in models["data"]]


def test_the_engine_runs_unprivileged_in_its_sandbox():
    """Both ranks' engines (llama-server, ggml-rpc-server) run as sparkplay-engine with no capabilities, no
    way to gain privileges and a seccomp filter; systemd-analyze scores the unit, and the same unit without
    the sandbox lines, on the node itself (docs/security.md)."""
    for rank in (0, 1):
        pid = unit(rank, "MainPID")["MainPID"]
        fields = dict(line.split(":", 1) for line in in_node(rank, "cat", f"/proc/{pid}/status").stdout.splitlines())
        user = in_node(rank, "id", "-u", "sparkplay-engine").stdout.strip()
        assert fields["Uid"].split() == [user] * 4
        assert int(fields["CapEff"], 16) == 0 and int(fields["CapBnd"], 16) == 0
        assert fields["NoNewPrivs"].strip() == "1" and fields["Seccomp"].strip() == "2"
    unit_file = in_node(0, "cat", f"/etc/systemd/system/{UNIT}").stdout
    bare = "\n".join(line for line in unit_file.splitlines() if not re.match(SANDBOX_LINE, line))
    in_node(0, "sh", "-c", f"mkdir -p /tmp/bare && cat > /tmp/bare/{UNIT} <<'EOF'\n{bare}\nEOF")
    scores = {}
    for name, path in (("before", f"/tmp/bare/{UNIT}"), ("after", f"/etc/systemd/system/{UNIT}")):
        out = in_node(0, "systemd-analyze", "security", "--offline=true", "--no-pager", path).stdout
        scores[name] = float(re.search(r"Overall exposure level for \S+: ([\d.]+)", out).group(1))
    print(f"systemd-analyze security exposure of {UNIT}: before {scores['before']}, after {scores['after']}")
    assert scores["after"] < 3.0 < scores["before"]


# the lines the plan's sandbox adds (sparkplay.engines.systemd), by their key
SANDBOX_LINE = "^(" + "|".join(sorted({line.split("=", 1)[0] for line in sandbox("u", "/h", [])})) + ")="


def test_a_privileged_request_stops_the_run_before_anything_changes():
    """A recipe that preloads a library into the engine is refused by serve.yml, one line naming the request
    and serve_allow, before any node changes: the served engines and their files stay as they were."""
    doc = yaml.safe_load((PROJECT / "recipes" / "lab-tiny.yml").read_text())
    doc["name"] = "lab-tiny-preload"
    doc["serve"]["env"]["LD_PRELOAD"] = "/var/lib/sparkplay/models/lab-tiny/lab-tiny.gguf"
    path = PROJECT / "recipes" / "lab-tiny-preload.yml"
    before = [(unit(r, "MainPID")["MainPID"], in_node(r, "cat", "/etc/sparkplay/serve.env").stdout) for r in (0, 1)]
    try:
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        proc = playbook("serve.yml", "-e", "recipe=lab-tiny-preload")
    finally:
        path.unlink()
    assert proc.returncode != 0
    assert "serve.env.LD_PRELOAD" in proc.stdout and "add 'env:LD_PRELOAD' to serve_allow" in proc.stdout
    assert "PLAY [Serve" not in proc.stdout  # stopped while loading the recipe, before any node was touched
    after = [(unit(r, "MainPID")["MainPID"], in_node(r, "cat", "/etc/sparkplay/serve.env").stdout) for r in (0, 1)]
    assert after == before


def test_systemd_reads_back_exactly_the_environment_a_native_env_file_holds():
    """systemd's own parser (EnvironmentFile= of a transient unit) gives back each value as written, quotes,
    backslashes, a trailing backslash, dollars and outer spaces included."""
    tricky = {
        "Q": 'say "hi" it\'s',
        "B": "a\\b\\",
        "S": "  lead and trail ",
        "D": "$HOME ${X} `id` %h",
        "E": "",
        "H": "#not a comment",
        "J": '{"k": [1, "v"]}',
        "U": "caf\u00e9",
    }
    text = env_file(tricky, "native")
    in_node(0, "sh", "-c", f"cat > /run/sparkplay-env-test.env <<'EOF'\n{text}EOF")
    out = in_node(
        0,
        "systemd-run",
        "--quiet",
        "--wait",
        "--pipe",
        "-p",
        "EnvironmentFile=/run/sparkplay-env-test.env",
        "/usr/bin/env",
        "-0",
    ).stdout
    seen = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    assert {k: seen.get(k) for k in tricky} == tricky


def test_the_inter_rank_port_answers_the_cable_and_nothing_else():
    """Rank 1's RPC port (unauthenticated) sits behind sparkplay's nftables table: reached over the cable
    (the model answers), dropped when reached at the node's other address (the lab's docker network),
    where a port sparkplay does not guard is refused at once as before."""
    rules = in_node(1, "nft", "list", "table", "inet", "sparkplay").stdout
    assert "tcp dport 50052 ip saddr { 192.168.100.10, 192.168.100.11, 192.168.101.10, 192.168.101.11 } accept" in rules
    other = in_node(1, "sh", "-c", "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1").stdout.strip()
    probe = "timeout 3 bash -c '</dev/tcp/{}/{}'"
    dropped = in_node(0, "bash", "-c", probe.format(other, 50052), check=False)
    refused = in_node(0, "bash", "-c", probe.format(other, 50059), check=False)
    assert dropped.returncode == 124, dropped  # no answer at all: the table dropped it
    assert refused.returncode == 1, refused  # an unguarded closed port still says no at once
    assert ask() is not None


# a fake OpenAI API: healthy, lists lab-tiny, answers every completion with "391"
def test_status_table_lists_every_rank():
    rows = status()
    assert len(rows) == 2
    assert rows[0].split()[:4] == ["0", "sparkplay-lab-rank0", UNIT, "active/running"]
    assert rows[0].split()[-3:] == ["ok", "lab-tiny", "ok"]  # health, model, the watchdog's last look
    assert rows[1].split()[:4] == ["1", "sparkplay-lab-rank1", UNIT, "active/running"]
    # the last start's receipt (issue 59): seconds from the leader unit's start to each step, ready meaning
    # the first streamed token of a real request
    ranks = json.loads(run_cli("status", "-i", "inventory/lab", "--json").stdout)
    kept = ranks[0]["receipt"]
    steps = [kept[k] for k in ("port_open_s", "http_ready_s", "listed_s", "first_token_s", "answer_s")]
    assert kept["since"] == "unit start" and all(isinstance(x, float) for x in steps) and steps == sorted(steps), kept
    assert ranks[1]["receipt"] is None  # a worker has no API of its own


def test_killed_worker_is_restarted_and_the_api_answers_again_within_60_s():
    restarts = int(unit(1, "NRestarts")["NRestarts"])
    in_node(1, "pkill", "-KILL", "-f", "ggml-rpc-server")
    time.sleep(5)  # no request in between: the leader's watcher must notice by itself
    assert "went away: restarting" in journal(0, "sparkplay-serve-watch.service")
    took = wait_answer(60)
    assert took is not None, journal(0)[-3000:]
    assert int(unit(1, "NRestarts")["NRestarts"]) == restarts + 1


def test_serving_comes_back_after_both_nodes_reboot():
    # a reboot of both nodes: the enabled units start on their own; the worker retries until the
    # cable is back (a lab restart loses its veth pairs; `lab up` re-wires them, as a cable would be)
    subprocess.run(["docker", "restart", "-t", "20", "sparkplay-lab-rank0", "sparkplay-lab-rank1"], check=True)
    assert run_cli("lab", "up").returncode == 0
    took = wait_answer(90)
    assert took is not None, journal(0)[-3000:] + journal(1)[-3000:]


def test_ctrl_c_stops_a_run_cleanly():
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkplay", "plan", "lab-tiny", "-i", "inventory/lab"],
        cwd=PROJECT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    time.sleep(8)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out[-3000:] + err
    assert "Interrupted: the playbook was stopped" in out
    assert time.monotonic() - started < 60


def test_lock_records_each_nodes_stack_and_holds_the_engine_packages():
    stand_in_nccl()
    proc = run_cli("lock", "-i", "inventory/lab", "--yes")
    assert proc.returncode == 0, proc.stdout[-3000:]
    lock = varsfile.load(LOCK.read_text())["sparkplay_stack_lock"]
    assert lock["recipe"]["name"] == "lab-tiny" and lock["hash"].startswith("sha256:")
    rank1 = lock["nodes"]["sparkplay-lab-rank1"]
    # the lab has no GPU: those rows say none, never a guess
    assert rank1["driver"] is None and rank1["cuda"] is None
    assert rank1["kernel"] and rank1["os"] and set(rank1["fabric"]) == {"enp1s0f1np1", "enP2p1s0f1np1"}
    assert rank1["engine_packages"]["llama.cpp-tools"] and rank1["files"][RPC_SERVER].startswith("sha256:")
    assert rank1["checkpoints"]["/var/lib/sparkplay/models/lab-tiny"]["manifest"]
    assert rank1["libraries"][NCCL] == lock["nodes"]["sparkplay-lab-rank0"]["libraries"][NCCL]
    for rank in (0, 1):
        assert {"llama.cpp-tools", "libggml0-backend-rpc"} <= set(held(rank))
    again = run_cli("lock", "-i", "inventory/lab")
    assert again.returncode == 0 and "unchanged" in again.stdout  # locking twice changes nothing
