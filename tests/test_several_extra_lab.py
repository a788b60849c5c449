"""Several models on the real lab, the slow extras (make test-extra): a second controller refused by the nodes' own lock
while a run holds them; a copy corrupted under a running added model, named and repaired (issue 53); an added
deployment updated beside itself while a client's requests never fail, a deployment across both nodes added beside
the primary, a gateway that asks for keys, and models served on demand (LRU eviction, TTL). Marked `lab` and `extra`,
kept out of `make test` for CI's time (issue 52); the rest of several models (the gateway, isolation, admission,
status, two runs at once, rank 0's copy never re-blessed, an answer changed under a running deployment, the memory
kill and the cable, stop) is tests/test_several_lab.py, in `make test`.

Everything is real, as there: the CLI, systemd in both nodes, llama.cpp from Debian, the gateway unit. The tests run
in file order on one lab of their own, lab-tiny across both ranks and lab-small on rank 1 first.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sparkplay.errors import ExitCode
from tests import steps
from tests.conftest import PROJECT, lab_cli, lab_small_as, run_cli
from tests.test_lab import in_node
from tests.test_several_lab import (
    FLIP,
    GATEWAY,
    SMALL,
    SMALL_UNIT,
    ask,
    curl,
    full_log,
    main_pid,
    sha256_on,
    status_text,
)

pytestmark = [pytest.mark.lab, pytest.mark.extra, pytest.mark.usefixtures("lab_host", "own_lab", "two_served")]

cli = lab_cli


@pytest.fixture(scope="module")
def two_served(own_lab: None) -> Iterator[None]:
    """lab-tiny across both ranks (the primary), lab-small added on rank 1, as test_several_lab starts."""
    for args in (("lab-tiny",), ("lab-small", "--add", "--node", "sparkplay-lab-rank1")):
        proc = cli("up", *args, "--yes")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    yield


def active_small() -> bool:
    return in_node(1, "systemctl", "is-active", SMALL_UNIT, check=False).stdout.strip() == "active"


def up_while_another_controller_stops(
    recipe: str,
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """`up RECIPE --add` on rank 1, and once it holds the nodes' run lock, `stop RECIPE --no-wait` from another
    controller (a state folder of its own, so its own controller lock): both results."""
    argv = [sys.executable, "-m", "sparkplay", "up", recipe, "--add", "--node", "sparkplay-lab-rank1"]
    first = steps.begin([*argv, "-i", "inventory/lab", "--yes"])
    deadline = time.monotonic() + 180  # its plan (a check run, which claims nothing) comes first
    while f'"pid": {first.pid}' not in in_node(1, "cat", "/run/sparkplay/run.lock", check=False).stdout:
        assert first.poll() is None and time.monotonic() < deadline, "the up never held rank 1's run lock"
        time.sleep(0.5)
    elsewhere = {"SPARKPLAY_STATE_DIR": str(Path(steps.__file__).parent.parent / ".cache" / "other-controller")}
    other = run_cli("stop", recipe, "-i", "inventory/lab", "--yes", "--no-wait", env=elsewhere)
    ran = steps.finish(
        first, step=f"sparkplay up {recipe} --add (beside another controller)", budget=steps.CLI_BUDGETS["up"]
    )
    return ran, other


def test_a_second_controller_beside_a_run_is_refused_by_the_nodes_lock_and_the_run_changes_nothing():
    """(From tests/test_several_lab.py's status test, issue 52.) A second controller (another checkout's state
    folder: its own controller lock) while `up lab-small --add` runs: each node's own lock makes it refuse
    (--no-wait) naming the run that holds the node, and nothing is stopped; the run, unchanged, starts no
    stand-in and leaves lab-small's engine as it was."""
    pid = in_node(1, "systemctl", "show", SMALL_UNIT, "--property=MainPID").stdout
    again, other = up_while_another_controller_stops("lab-small")
    assert other.returncode != 0, other.stdout[-3000:] + other.stderr
    said = other.stdout + other.stderr
    assert "Another run is changing this node: sparkplay-lab-rank1 is held by `sparkplay up lab-small --add" in said
    assert "Nothing was changed" in said and active_small(), said
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr
    assert "changed" not in "".join(line for line in again.stdout.splitlines() if line.startswith(" sparkplay-lab"))
    assert "lab-small is unchanged" in full_log(again)  # an unchanged added deployment starts no stand-in
    assert in_node(1, "systemctl", "show", SMALL_UNIT, "--property=MainPID").stdout == pid
    assert sorted(m["id"] for m in json.loads(curl(f"{GATEWAY}/models"))["data"]) == ["lab-small", "lab-tiny"]


# -- what serves is what was verified (issue 53; from tests/test_several_lab.py, issue 52) -----------------------


def test_a_copy_corrupted_under_a_running_added_model_is_named_repaired_and_served_from_the_verified_copy():
    """Rank 1's copy of lab-small (served from rank 1) flipped on disk: status names the engine serving a
    replaced file; verify names the rank, the file and what differed, re-mirrors it from rank 0's verified copy,
    restarts lab-small and exits 8; the engine then maps the verified file, not a deleted one."""
    good, pid = sha256_on(0, SMALL), main_pid(1, SMALL_UNIT)
    in_node(1, "python3", "-c", FLIP, SMALL)
    assert sha256_on(1, SMALL) != good
    assert "serving a file replaced at" in status_text()
    proc = cli("verify")
    said = proc.stdout + proc.stderr
    assert proc.returncode == int(ExitCode.REPAIRED), said[-4000:]
    assert "found: sparkplay-lab-rank1: lab-small/lab-small.gguf: its bytes differ; re-mirrored from rank 0" in said
    assert "restarted: lab-small (sparkplay-serve@lab-small.service)" in said
    assert "restarted: lab-tiny" not in said  # only the deployment whose file was replaced
    assert sha256_on(1, SMALL) == good
    new = main_pid(1, SMALL_UNIT)
    assert new != pid
    maps = in_node(1, "cat", f"/proc/{new}/maps").stdout
    assert SMALL in maps and "(deleted)" not in maps
    assert ask("lab-small")["model"] == "lab-small"
    again = cli("verify")  # nothing left to find
    assert again.returncode == 0 and "every checkpoint verified on every rank" in again.stdout, again.stderr[-2000:]


# a client on rank 0 sending one request after another through the gateway until /tmp/stop-client exists: one
# line per answer, its HTTP status (000: no answer at all)
CLIENT = r"""
body='{"model": "lab-small", "messages": [{"role": "user", "content": "What is 17*23?"}], "max_tokens": 4}'
rm -f /tmp/stop-client /tmp/client-codes
while [ ! -e /tmp/stop-client ]; do
  curl -s -o /dev/null -w '%{http_code}\n' -m 60 -H 'Content-Type: application/json' -d "$body" \
    http://127.0.0.1:9930/v1/chat/completions >> /tmp/client-codes
done
"""


def test_a_changed_added_deployment_is_updated_beside_itself_and_no_request_through_the_gateway_fails():
    """lab-small's context changed (512 -> 256 tokens), then `up lab-small --add` again while a client on rank 0
    sends requests through the gateway one after another: the new version starts beside the old as
    lab-small.NEW (port 10933) and takes the route once it answers; lab-small restarts with it and takes the
    route back; the stand-in goes. Every request is answered 200, counted. (lab-small keeps the 256-token
    context for the tests after this one, which ask it for fewer tokens.)"""
    path = PROJECT / "recipes" / "lab-small.yml"
    kept = path.read_text()
    doc = yaml.safe_load(kept)
    doc["serve"]["args"][doc["serve"]["args"].index("-c") + 1] = "256"
    doc["context_length"] = 256
    client = subprocess.Popen(["docker", "exec", "sparkplay-lab-rank0", "bash", "-c", CLIENT])
    try:
        time.sleep(2)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        started = time.monotonic()
        proc = cli("up", "lab-small", "--add", "--node", "sparkplay-lab-rank1", "--yes")
        took = time.monotonic() - started
        time.sleep(2)
    finally:
        path.write_text(kept)
        in_node(0, "touch", "/tmp/stop-client")
        client.wait(timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    codes = in_node(0, "cat", "/tmp/client-codes").stdout.split()
    failed = [c for c in codes if c != "200"]
    print(
        f"\nupdate beside itself: {len(codes)} requests through the gateway during a {took:.0f} s `up`, "
        f"{len(failed)} failed"
    )
    assert len(codes) >= 20 and not failed, (len(codes), sorted(set(codes)))
    said = full_log(proc)
    assert "lab-small changed: its new version starts beside the running one first" in said
    moves = re.findall(r"lab-small is routed to (http://\S+) \(was (http://\S+)\): .*?nothing is in flight", said)
    ports = [(new.rsplit(":", 1)[1], old.rsplit(":", 1)[1]) for new, old in moves]
    assert ports == [("10933", "9933"), ("9933", "10933")], ports
    # lab-small runs the new version under its own names; the stand-in left nothing behind
    assert '"-c" "256"' in in_node(1, "systemctl", "cat", SMALL_UNIT).stdout
    for gone in ("lab-small.NEW.json", "lab-small.NEW.env"):
        assert in_node(1, "test", "-e", f"/etc/sparkplay/serve.d/{gone}", check=False).returncode == 1, gone
    assert (
        in_node(1, "test", "-e", "/etc/systemd/system/sparkplay-serve@lab-small.NEW.service", check=False).returncode
        == 1
    )
    routes = json.loads(in_node(0, "cat", "/etc/sparkplay/gateway-routes.json").stdout)["models"]
    assert routes["lab-small"]["slot"] == "lab-small" and routes["lab-small"]["url"].endswith(":9933")


def test_a_deployment_across_both_nodes_added_beside_lab_tiny_answers_and_goes_cleanly():
    """lab-tiny's model again, as lab-pair across both ranks (llama.cpp's RPC), added beside lab-tiny which
    spans them too: its worker meets its leader on the port after its API port, behind a firewall table of
    its own; both answer through the gateway; stopped, it leaves nothing behind and lab-tiny serving."""
    path = PROJECT / "recipes" / "lab-pair.yml"
    doc = yaml.safe_load((PROJECT / "recipes" / "lab-tiny.yml").read_text())
    doc.update(name="lab-pair")
    doc["topology"]["nodes"] = 2
    doc["model"]["served_name"] = "lab-pair"
    args = doc["serve"]["args"]
    args[args.index("--alias") + 1] = "lab-pair"
    doc["serve"]["port"] = 9945
    try:
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        proc = cli("up", "lab-pair", "--add", "--yes")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
        assert [
            in_node(r, "systemctl", "is-active", "sparkplay-serve@lab-pair.service").stdout.strip() for r in (0, 1)
        ] == ["active", "active"]
        worker = in_node(1, "systemctl", "show", "-p", "ExecStart", "sparkplay-serve@lab-pair.service").stdout
        assert "-p 9946" in worker, worker
        tables = in_node(1, "nft", "list", "tables").stdout
        assert "table inet sparkplay_" in tables and "table inet sparkplay\n" in tables + "\n", tables
        assert ask("lab-pair")["model"] == "lab-pair" and ask("lab-tiny")["model"] == "lab-tiny"
        claims = [
            json.loads(in_node(r, "cat", "/etc/sparkplay/serve.d/lab-pair.json").stdout)["claim"]["bytes"]
            for r in (0, 1)
        ]
        assert all(c > 0 for c in claims), claims  # each rank's claim on its own node
    finally:
        path.unlink(missing_ok=True)
    proc = cli("stop", "lab-pair", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    for rank in (0, 1):
        assert in_node(rank, "test", "-e", "/etc/sparkplay/serve.d/lab-pair.json", check=False).returncode == 1
    assert "sparkplay_" not in in_node(1, "nft", "list", "tables").stdout.replace("inet sparkplay\n", "")
    assert ask("lab-tiny")["model"] == "lab-tiny"


def test_a_gateway_with_keys_refuses_a_request_without_one_and_engines_keep_theirs(tmp_path):
    """The inventory names a keys file (0600 on the controller); lab-small's model comes back as lab-keyed,
    with a key of its own (--api-key): a client needs one of the gateway's keys and never the engine's."""
    keys = tmp_path / "gateway-keys"
    keys.write_text("# the team\nsk-lab-one\nsk-lab-two\n")
    keys.chmod(0o644)
    settings = PROJECT / "inventory" / "lab" / "group_vars" / "all" / "sparkplay.yml"
    recipe = PROJECT / "recipes" / "lab-keyed.yml"
    small = yaml.safe_load((PROJECT / "recipes" / "lab-small.yml").read_text())
    doc = lab_small_as("lab-keyed", int(small["context_length"]), 9935)
    doc["serve"]["args"] += ["--api-key", "engine-only-key"]
    before = settings.read_text()
    try:
        recipe.write_text(yaml.safe_dump(doc, sort_keys=False))
        settings.write_text(before + f"\nserve_gateway_keys_file: {keys}\n")
        refused = cli("up", "lab-keyed", "--add", "--node", "sparkplay-lab-rank1", "--yes")
        assert refused.returncode != 0 and "mode 0600" in refused.stdout + refused.stderr  # others may read it
        keys.chmod(0o600)
        proc = cli("up", "lab-keyed", "--add", "--node", "sparkplay-lab-rank1", "--yes")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
        body = {"model": "lab-keyed", "messages": [{"role": "user", "content": "What is 17*23?"}], "max_tokens": 4}
        bare = json.loads(curl(f"{GATEWAY}/chat/completions", body) or "{}")
        assert bare["error"]["code"] == "invalid_api_key", bare
        engine_key = json.loads(curl(f"{GATEWAY}/chat/completions", body, key="engine-only-key") or "{}")
        assert engine_key["error"]["code"] == "invalid_api_key"
        for key in ("sk-lab-one", "sk-lab-two"):
            answer = json.loads(curl(f"{GATEWAY}/chat/completions", body, key=key) or "{}")
            assert answer.get("model") == "lab-keyed", answer
        assert in_node(0, "stat", "-c", "%U:%G %a", "/etc/sparkplay/gateway/keys").stdout.split() == [
            "root:sparkplay-gateway",
            "640",
        ]
        status = json.loads(run_cli("status", "-i", "inventory/lab", "--json").stdout)
        assert status["gateway"]["keys_required"] is True
        address = json.loads(in_node(1, "cat", "/etc/sparkplay/serve.d/lab-keyed.json").stdout)["address"]
        direct = in_node(
            1,
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-d",
            json.dumps(body),
            f"http://{address}:9935/v1/chat/completions",
            check=False,
        ).stdout
        assert direct == "401"  # the engine's own key holds
    finally:
        settings.write_text(before)
        recipe.unlink(missing_ok=True)


def test_models_on_demand_start_when_asked_for_make_room_lru_and_stop_after_their_ttl(tmp_path):
    """Three copies of lab-small's model with a 1M-token context (half a GiB of KV cache each, allocated for
    real: a claim of about 1.1 GiB), on demand on rank 1 within a budget of 2.5 GiB: two fit, three do not.
    Each is proven at `up` and stopped; asked for in turn through the gateway, each answers, the least
    recently used is stopped to make room, no request fails; idle past the TTL, they stop."""
    settings = PROJECT / "inventory" / "lab" / "group_vars" / "all" / "sparkplay.yml"
    before = settings.read_text()
    recipes = [PROJECT / "recipes" / f"{name}.yml" for name in ON_DEMAND]
    try:
        for port, (name, path) in enumerate(zip(ON_DEMAND, recipes, strict=True), start=9941):
            path.write_text(yaml.safe_dump(lab_small_as(name, 1 << 20, port), sort_keys=False))
        settings.write_text(
            before + f"\nserve_on_demand: {ON_DEMAND}\nserve_on_demand_ttl: 30\nserve_on_demand_budget_gib: 2.5\n"
        )
        for name in ON_DEMAND:
            proc = cli("up", name, "--add", "--node", "sparkplay-lab-rank1", "--yes")
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
            assert active(name) is False, name  # proven, then stopped until asked for
        claim = json.loads(in_node(1, "cat", "/etc/sparkplay/serve.d/lab-od-a.json").stdout)["claim"]["bytes"]
        assert 1.0 * 2**30 < claim < 1.25 * 2**30, claim
        took = {}
        for name in ON_DEMAND:  # a, then b beside it, then c: a (the least recently used) makes room
            started = time.monotonic()
            out = in_node(
                0,
                "curl",
                "-sN",
                "-m",
                "60",
                "-H",
                "Content-Type: application/json",
                "-d",
                json.dumps(
                    {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True}
                ),
                f"{GATEWAY}/chat/completions",
                check=False,
            ).stdout
            took[name] = round(time.monotonic() - started, 1)
            assert out.rstrip().endswith("data: [DONE]"), (name, out[-500:])
        assert [active(n) for n in ON_DEMAND] == [False, True, True]
        assert max(took.values()) < 15, took  # a stopped llama.cpp model answers within 15 s of being asked for
        print(f"swap times (request for a stopped model -> its whole short stream): {took}")
        journal = in_node(0, "journalctl", "-u", "sparkplay-gateway", "--no-pager", "-o", "cat").stdout
        assert "stopping lab-od-a: evicted (least recently used) to make room for lab-od-c" in journal
        metrics = in_node(0, "curl", "-s", "http://127.0.0.1:9930/metrics").stdout  # its venv's prometheus_client
        assert 'sparkplay_gateway_evictions_total{model="lab-od-a"} 1.0' in metrics, metrics[-2000:]
        status = json.loads(run_cli("status", "-i", "inventory/lab", "--json").stdout)["gateway"]
        assert status["model_states"]["lab-od-a"] == "stopped on demand", status
        assert status["model_states"]["lab-od-c"] == "serving on demand", status
        swap = status["receipts"]["lab-od-c"]  # the swap's receipt (issue 59), from when the gateway asked for it
        assert swap["since"] == "asked for" and 0 <= swap["port_open_s"] <= swap["http_ready_s"], swap
        assert swap["http_ready_s"] <= swap["first_token_s"] <= took["lab-od-c"], swap
        for _ in range(60):  # idle past the TTL (30 s): b and c stop
            if not any(active(n) for n in ON_DEMAND):
                break
            time.sleep(2)
        assert [active(n) for n in ON_DEMAND] == [False, False, False]
        assert (
            "idle for 30 s (its TTL)"
            in in_node(0, "journalctl", "-u", "sparkplay-gateway", "--no-pager", "-o", "cat").stdout
        )
    finally:
        settings.write_text(before)
        for path in recipes:
            path.unlink(missing_ok=True)


ON_DEMAND = ["lab-od-a", "lab-od-b", "lab-od-c"]


def active(name: str) -> bool:
    return (
        in_node(1, "systemctl", "is-active", f"sparkplay-serve@{name}.service", check=False).stdout.strip() == "active"
    )
