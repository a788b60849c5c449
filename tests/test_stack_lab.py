"""What a served lab lives through besides make test's faults, on the real lab: plan on the served lab, a foreign file
asked about before it is replaced, another program holding the API's port, the leader waiting for a stopped worker,
the watchdog restarting a wedged engine and standing down past its cap, a health that never comes, a change the
engine refuses going back by itself, rollback, drift from the stack lock and reset; the bench across both ranks and
each importer's recipe planned against the served nodes. Marked `lab` and `stack` (`make test-stack`), out of `make
test` for CI's time (issue 52: they ran in tests/test_serve_lab.py until then, every assertion as it was).

Everything is real, as in tests/test_serve_lab.py: the CLI, systemd on both nodes, llama.cpp over the simulated
cable. The tests run in file order on one lab, lab-tiny served first.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import serving
from tests.conftest import PROJECT, run_cli
from tests.serving import (
    LOCK,
    NCCL,
    RPC_SERVER,
    ask,
    held,
    journal,
    lab_tiny_variant,
    served_models,
    stand_in_nccl,
    status,
    unit,
    up,
    wait_answer,
    wait_for,
)
from tests.test_lab import in_node
from tests.test_provision_lab import playbook

pytestmark = [pytest.mark.lab, pytest.mark.stack, pytest.mark.usefixtures("lab_host", "own_lab", "served")]


@pytest.fixture(scope="module")
def served(own_lab: None) -> Iterator[None]:
    """lab-tiny across both ranks, from the provisioned nodes' snapshot."""
    proc = up("--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert ask()
    yield


IMPORTED = {
    "lab-tiny-site.json": "lab-tiny-site",
    "lab-tiny.toml": "lab-tiny-toml",
    "lab-tiny-sparkrun.yaml": "lab-tiny-sparkrun",
}


@pytest.fixture(scope="module")
def importers_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project whose catalog holds the lab's recipe as each importer reads it from its format."""
    root = tmp_path_factory.mktemp("importers") / "project"
    shutil.copytree(
        PROJECT,
        root,
        symlinks=True,
        ignore=shutil.ignore_patterns(".venv", ".git", ".cache", ".ansible", "inventory", "recipes"),
    )
    for fixture in IMPORTED:
        source = PROJECT / "tests" / "fixtures" / "lab" / fixture
        proc = run_cli("recipe", "import", str(source), "--project-dir", str(root))
        assert proc.returncode == 0, proc.stderr
    return root


@pytest.mark.parametrize(("fixture", "name"), IMPORTED.items())
def test_a_recipe_from_each_importer_plans_on_the_lab(importers_project, fixture, name):
    """Website JSON, launcher TOML and sparkrun YAML, imported, then planned against the served lab: the
    deployment from the inventory alone, then the serve step's check run with the nodes' own facts."""
    lab = str(PROJECT / "inventory" / "lab")
    shown = run_cli("plan", name, "-i", lab, "--json", "--project-dir", str(importers_project))
    assert shown.returncode == 0, shown.stderr
    computed = json.loads(shown.stdout)
    assert computed["recipe"] == name and computed["engine"]["name"] == "llamacpp"
    assert [n["rank"] for n in computed["nodes"]] == [0, 1]
    proc = run_cli("plan", name, "-i", lab, "--only", "serve", "--project-dir", str(importers_project))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert "plan:" in proc.stdout


BENCH_PROFILE = "pp: [64]\ntg: [16]\nconcurrency: [1, 2, 4]\nruns: 1\ninvariance_tokens: 24\n"


def test_bench_measures_across_both_ranks_and_checks_the_output_is_batch_invariant(tmp_path):
    """Real: llama-benchy 0.4.0 from the package index in a virtualenv on the leader, against llama.cpp serving
    lab-tiny over the cable; no corpus named (the one the bench role ships: no download), the tokenizer the lab
    model's own."""
    profile = tmp_path / "profile.yml"
    profile.write_text(BENCH_PROFILE)
    results = tmp_path / "results"
    proc = run_cli("bench", "-i", "inventory/lab", "--profile", str(profile), "--results", str(results))
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
    kept = sorted((results / "lab-tiny").glob("*.json"))
    assert len(kept) == 1 and re.fullmatch(r"\d{8}T\d{6}Z-lab-tiny-r[0-9a-f]{12}-e[0-9a-f]{12}\.json", kept[0].name)
    doc = json.loads(kept[0].read_text())
    assert "llama.cpp-tools=" in doc["engine_build"]  # the native engine's package versions
    rows = {(r["concurrency"], r["prompt_size"]): r for r in doc["benchy"]["benchmarks"]}
    assert set(rows) >= {(1, 64), (2, 64), (4, 64)}
    assert all(r["tg_throughput"]["mean"] > 0 for r in rows.values())
    # llama-benchy leaves a prompt rate out (null) where it could not time the prompt apart from the first token
    # (seen once in CI at concurrency > 1 on this 0.5 MB model); alone, it always times it
    assert rows[(1, 64)]["pp_throughput"]["mean"] > 0
    assert all(r["pp_throughput"]["mean"] > 0 for r in rows.values() if r["pp_throughput"] is not None)
    assert kept[0].with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert "generation tok/s" in proc.stdout and "client overhead at concurrency 1:" in proc.stdout
    check = doc["invariance"]
    assert check["identical"] and check["levels"] == [2, 4] and check["unit"] == "token", check
    assert "invariance: 4 prompts gave the same tokens alone and at concurrency 2, 4" in proc.stdout
    # installed from the hash-pinned lock by the unprivileged user, under the state folder reset empties
    owner = in_node(0, "stat", "-c", "%U", "/var/lib/sparkplay/bench/venv/bin/llama-benchy").stdout.strip()
    assert owner == "sparkplay-bench"  # its own user, never an engine's (issue 54)
    # against itself: every rate's ratio is printed
    again = run_cli(
        "bench",
        "-i",
        "inventory/lab",
        "--profile",
        str(profile),
        "--results",
        str(results),
        "--compare",
        str(kept[0]),
        timeout=1200,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert re.search(r"^c1 pp64 tg16 d0 tg_tps: [\d.]+ vs [\d.]+ = x[\d.]+$", again.stdout, re.M)


WATCHDOG_STATE = "/var/lib/sparkplay/watchdog.json"
FAST_WATCHDOG = (
    "-e",
    "serve_watchdog_interval=2",
    "-e",
    "serve_watchdog_failures=2",
    "-e",
    "serve_watchdog_probe_timeout=3",
    "-e",
    "serve_watchdog_max_restarts=1",
    "-e",
    "serve_watchdog_grace=20",
)


def watchdog_state() -> dict:
    return json.loads(in_node(0, "cat", WATCHDOG_STATE).stdout)


def watchdog_metrics() -> dict[str, float]:
    text = in_node(
        0,
        "python3",
        "-c",
        "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9899/metrics', timeout=5).read().decode())",
    ).stdout
    found = re.finditer(r'^(sparkplay_watchdog_\w+)\{model="lab-tiny",unit="[^"]+"\} (\S+)$', text, re.M)
    return {m.group(1): float(m.group(2)) for m in found}


# -- from tests/test_serve_lab.py (issue 52), every assertion as it was ------------------------------------------


def test_plan_on_the_served_lab_reports_no_changes():
    proc = run_cli("plan", "lab-tiny", "-i", "inventory/lab", "--offline")  # nothing to download
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert "plan: no changes on any host" in proc.stdout
    assert "would be backed up and replaced" not in proc.stdout


def test_a_foreign_file_stops_up_without_a_terminal_and_yes_backs_it_up():
    env = "/etc/sparkplay/serve.env"
    in_node(1, "sh", "-c", f"echo '# my own tuning' >> {env}")
    edited = in_node(1, "cat", env).stdout
    proc = up("--only", "serve")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr
    assert f"! sparkplay-lab-rank1: {env}" in proc.stdout
    assert "1 foreign file(s) listed above" in proc.stderr
    assert in_node(1, "cat", env).stdout == edited  # untouched
    proc = up("--only", "serve", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert "# my own tuning" not in in_node(1, "cat", env).stdout
    backups = in_node(1, "sh", "-c", f"cat {env}.*~").stdout
    assert backups == edited  # the user's version, kept beside it
    assert ask()


FAKE_API = """
import http.server, json
class Fake(http.server.BaseHTTPRequestHandler):
    def reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.reply({"data": [{"id": "lab-tiny"}]} if self.path.startswith("/v1/models") else {"status": "ok"})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply({"choices": [{"message": {"content": "391"}}], "usage": {"completion_tokens": 1}})
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", 9931), Fake).serve_forever()
"""


def test_a_fake_api_bound_first_on_the_port_is_named_and_never_taken_for_the_model():
    """A local user's server that binds the API's port while the engine is down answers health, models and
    completions: the serve role's wait names it (PID, program) instead of calling the model ready."""
    in_node(0, "systemctl", "stop", "sparkplay-serve-watchdog.service", "sparkplay-serve-watch.service", serving.UNIT)
    in_node(0, "sh", "-c", f"cat > /tmp/fake_api.py <<'EOF'\n{FAKE_API}\nEOF")
    in_node(0, "systemd-run", "--unit", "squatter", "--uid", "nobody", "/usr/bin/python3", "/tmp/fake_api.py")
    try:
        assert wait_for(lambda: ask(timeout=2), 30) is not None  # the fake answers like a model
        proc = playbook("serve.yml", "-e", "recipe=lab-tiny")
        assert proc.returncode != 0, proc.stdout[-3000:]
        held = r"port 9931 is held by PID \d+ \(python3\) of \S*/squatter\.service, not by sparkplay-serve\.service"
        assert re.search(held, proc.stdout), proc.stdout[-3000:]
    finally:
        in_node(0, "systemctl", "stop", "squatter", check=False)
    proc = playbook("serve.yml", "-e", "recipe=lab-tiny")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert ask() is not None


def test_leader_waits_for_a_stopped_worker_and_status_shows_it():
    proc = playbook("stop.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    for rank in (0, 1):
        assert unit(rank, "ActiveState")["ActiveState"] == "inactive"
        assert in_node(rank, "systemctl", "is-enabled", serving.UNIT, check=False).stdout.strip() == "disabled"
    in_node(0, "systemctl", "start", "--no-block", serving.UNIT)
    time.sleep(4)
    rows = status()
    assert rows[0].split()[3] == "active/running" and rows[0].split()[-3] == "down"  # waiting for rank 1's port
    assert rows[1].split()[3] == "inactive/dead"
    assert "waiting for 192.168.100.11:50052" in journal(0)
    rows = json.loads(run_cli("status", "-i", "inventory/lab", "--json").stdout)
    assert [(r["rank"], r["up"], r["state"], r["health"]) for r in rows] == [
        (0, False, "active/running", "down"),
        (1, False, "inactive/dead", "-"),
    ]
    logs = run_cli("logs", "-i", "inventory/lab", "--rank", "1", "-n", "400")
    assert logs.returncode == 0
    assert "sparkplay-lab-rank1" in logs.stdout and "Stopped sparkplay-serve.service" in logs.stdout
    in_node(1, "systemctl", "start", serving.UNIT)
    assert wait_answer(60) is not None, journal(0)[-3000:]
    rows = json.loads(run_cli("status", "-i", "inventory/lab", "--json").stdout)
    assert [(r["rank"], r["up"], r["health"], r["model"]) for r in rows] == [
        (0, True, "ok", "lab-tiny"),
        (1, True, "-", "-"),
    ]


def test_a_wedged_leader_is_restarted_with_every_rank_in_order_and_answers_again():
    """Real: llama-server stopped with SIGSTOP (its process up, its port open, no answers), the watchdog
    unit on the leader, systemd on both ranks, ssh over the cable to the worker, Prometheus counters."""
    proc = playbook("serve.yml", "-e", "recipe=lab-tiny", *FAST_WATCHDOG)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert wait_for(lambda: watchdog_state().get("status") == "ok", 30) is not None
    before = {rank: unit(rank, "InvocationID")["InvocationID"] for rank in (0, 1)}
    in_node(0, "pkill", "-STOP", "-f", "llama-server")
    # two failed probes (2 s apart, 3 s each), every rank stopped and started, the model loaded: 60 s bound
    restarted = lambda: watchdog_state().get("restarts_total") == 1 and watchdog_state().get("status") == "ok"  # noqa: E731
    took = wait_for(lambda: restarted() and ask(timeout=5) is not None, 60)
    assert took is not None, in_node(0, "journalctl", "-u", "sparkplay-serve-watchdog", "--no-pager").stdout[-3000:]
    assert all(unit(rank, "InvocationID")["InvocationID"] != before[rank] for rank in (0, 1))  # every rank
    # in order: the worker started before the leader (the containers share the host's monotonic clock)
    start = {r: int(unit(r, "ExecMainStartTimestampMonotonic")["ExecMainStartTimestampMonotonic"]) for r in (0, 1)}
    assert start[1] < start[0]
    assert "restarting every rank" in in_node(0, "journalctl", "-u", "sparkplay-serve-watchdog", "--no-pager").stdout
    metrics = watchdog_metrics()
    assert metrics["sparkplay_watchdog_restarts_total"] == 1 and metrics["sparkplay_watchdog_probe_failures_total"] >= 2


def test_a_second_wedge_beyond_the_cap_stands_the_watchdog_down_and_status_says_so():
    in_node(0, "pkill", "-STOP", "-f", "llama-server")
    try:
        stood = wait_for(lambda: watchdog_state().get("status") == "stood-down", 60)
        assert stood is not None, (
            watchdog_state(),
            in_node(0, "journalctl", "-u", "sparkplay-serve-watchdog", "--no-pager").stdout[-3000:],
        )
        rows = json.loads(run_cli("status", "-i", "inventory/lab", "--json").stdout)
        assert rows[0]["watchdog"] == "stood-down" and "standing down" in rows[0]["watchdog_stood_down"]["why"]
        assert watchdog_metrics()["sparkplay_watchdog_stood_down"] == 1
    finally:
        in_node(0, "pkill", "-CONT", "-f", "llama-server")
    # a deploy with the default watchdog lifts the stand-down
    proc = playbook("serve.yml", "-e", "recipe=lab-tiny")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert wait_for(lambda: watchdog_state().get("status") == "ok", 30) is not None
    assert wait_answer(30) is not None


def test_health_that_never_comes_fails_at_the_timeout_with_every_ranks_journal():
    # a recipe whose server lists another model name: /health is fine, /v1/models never shows it
    doc = yaml.safe_load((PROJECT / "recipes" / "lab-tiny.yml").read_text())
    doc["name"] = "lab-tiny-silent"
    doc["serve"]["args"][-1] = "some-other-name"
    doc["serve"]["health_timeout_s"] = 15
    path: Path = PROJECT / "recipes" / "lab-tiny-silent.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        started = time.monotonic()
        proc = playbook("serve.yml", "-e", "recipe=lab-tiny-silent")
        took = time.monotonic() - started
    finally:
        path.unlink()
    assert proc.returncode != 0
    assert "lab-tiny-silent is not serving: not ready after 15 s (stuck at: models)" in proc.stdout
    # both ranks' last journal lines, not a bare timeout
    assert '"rank 0": [' in proc.stdout and '"rank 1": [' in proc.stdout
    assert "sparkplay-serve" in proc.stdout.split('"rank 1": [', 1)[1][:4000]
    assert took < 15 + 120, f"took {took:.0f} s"


def test_a_change_the_engine_refuses_goes_back_to_the_last_good_by_itself_and_serves_again():
    with lab_tiny_variant("lab-tiny-bad", extra=("--no-such-flag",)):
        started = time.monotonic()
        proc = run_cli("up", "lab-tiny-bad", "-i", "inventory/lab", "--yes", "--only", "serve")
        took = time.monotonic() - started
    assert proc.returncode != 0
    assert "lab-tiny-bad is not serving" in proc.stdout
    found = re.search(
        r"went back to the last deployment that answered \(lab-tiny\): it answers again, ([0-9.]+) s", proc.stdout
    )
    assert found, proc.stdout[-3000:]
    print(f"\nrollback: lab-tiny answers again {found.group(1)} s after lab-tiny-bad failed; whole up {took:.0f} s")
    assert ask() and served_models() == ["lab-tiny"]
    inventory = yaml.safe_load((PROJECT / "inventory" / "lab" / "group_vars" / "all" / "sparkplay.yml").read_text())
    assert inventory["sparkplay_recipe"] == "lab-tiny"  # its choice before the failed change is back


def test_rollback_returns_to_the_previous_recipe_and_forward_again():
    with lab_tiny_variant("lab-tiny-two", args={"-c": "256"}):
        proc = run_cli("up", "lab-tiny-two", "-i", "inventory/lab", "--yes", "--only", "serve")
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert served_models() == ["lab-tiny-two"]
        back = run_cli("rollback", "-i", "inventory/lab", "--yes")
        assert back.returncode == 0, back.stdout[-3000:]
        assert "lab-tiny answers again" in back.stdout and served_models() == ["lab-tiny"] and ask()
        forward = run_cli("rollback", "-i", "inventory/lab", "--yes")  # the last good and the previous traded
        assert forward.returncode == 0 and served_models() == ["lab-tiny-two"], forward.stdout[-3000:]
        assert run_cli("rollback", "-i", "inventory/lab", "--yes").returncode == 0 and served_models() == ["lab-tiny"]


def test_a_changed_engine_file_is_drift_that_doctor_and_status_name_and_up_refuses_until_accepted():
    # the stack locked first (what the lock holds: tests/test_serve_lab.py)
    stand_in_nccl()
    assert run_cli("lock", "-i", "inventory/lab", "--yes").returncode == 0 and LOCK.exists()
    # a llama.cpp built by hand over the packaged one on rank 1 (the same program plus a byte)
    in_node(
        1,
        "sh",
        "-c",
        f"cp -p {RPC_SERVER} {RPC_SERVER}.new && printf '\\n' >> {RPC_SERVER}.new && mv {RPC_SERVER}.new {RPC_SERVER}",
    )
    # and rank 0's NCCL swapped for another build of the same version (what users did by hand: pip's for DGX OS's)
    in_node(0, "sh", "-c", f"printf 'ELF nccl 2.28.3, another build' > {NCCL}")
    said = f"rank 1 (sparkplay-lab-rank1): file {RPC_SERVER} sha256:"
    status_now = run_cli("status", "-i", "inventory/lab")
    assert said in status_now.stdout and "(locked sha256:" in status_now.stdout, status_now.stdout[-2000:]
    doctor = run_cli("doctor", "-i", "inventory/lab")
    assert said in doctor.stdout, doctor.stdout[-2000:]
    assert f"rank 0 (sparkplay-lab-rank0): library {NCCL} sha256:" in doctor.stdout, doctor.stdout[-2000:]
    since = unit(1, "ActiveEnterTimestamp")
    refused = up("--yes", "--only", "serve")
    assert refused.returncode != 0 and "drifted from its lock" in refused.stdout and said in refused.stdout
    assert unit(1, "ActiveEnterTimestamp") == since  # nothing changed
    accepted = up("--yes", "--accept-drift", "--only", "serve")
    assert accepted.returncode == 0, accepted.stdout[-3000:]
    assert "locked anew (drift accepted)" in accepted.stdout


def test_reset_releases_the_holds_and_moves_the_lock_aside():
    assert LOCK.exists()
    in_node(1, "apt-mark", "hold", "libggml0")  # a person's own hold stays
    proc = playbook("reset.yml", "-e", "sparkplay_confirm_overwrite=true")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not LOCK.exists() and list((LOCK.parents[2] / ".sparkplay-backups").glob("sparkplay_stack_lock.yml.*"))
    assert held(0) == [] and held(1) == ["libggml0"]
    in_node(1, "apt-mark", "unhold", "libggml0")
