"""Several models on the real lab behind one endpoint: lab-tiny across both ranks (the primary), lab-small (a
second generated model of another size) added on rank 1, both answering through the gateway on rank 0; a third
whose memory claim cannot fit refused with the reason and nothing changed; stopping one leaves the other
answering. Marked `lab`.

Everything is real: the CLI driving ansible-runner, the units under systemd in both nodes, llama.cpp from
Debian, the gateway unit as its own user (aiohttp from its hash-pinned virtualenv), /proc/meminfo of the
nodes (the host's: the lab's containers share its memory). The tests run in file order on one lab of their own.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import PROJECT, lab_cli, lab_small_as, run_cli
from tests.test_lab import in_node
from tests.test_untrusted import ESCAPE_ATTEMPTS

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("lab_host", "own_lab")]

GATEWAY = "http://127.0.0.1:9930/v1"
SMALL_UNIT = "sparkplay-serve@lab-small.service"


cli = lab_cli


def curl(url: str, body: dict | None = None, timeout: float = 20, key: str | None = None) -> str:
    data = ["-H", "Content-Type: application/json", "-d", json.dumps(body)] if body is not None else []
    data += ["-H", f"Authorization: Bearer {key}"] if key else []
    return in_node(0, "curl", "-s", "-m", str(timeout), *data, url, check=False).stdout


def ask(model: str, url: str = GATEWAY, stream: bool = False) -> dict | str:
    body = {"model": model, "messages": [{"role": "user", "content": "What is 17*23?"}], "temperature": 0,
            "max_tokens": 8, "stream": stream}  # fmt: skip
    out = curl(f"{url}/chat/completions", body)
    return out if stream else json.loads(out or "{}")


def served() -> list[str]:
    return sorted(m["id"] for m in json.loads(curl(f"{GATEWAY}/models") or '{"data": []}')["data"])


def test_the_primary_then_a_second_model_beside_it_on_the_other_node():
    proc = cli("up", "lab-tiny", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert (
        in_node(0, "test", "-e", "/etc/sparkplay/gateway-routes.json", check=False).returncode == 1
    )  # one model: no gateway
    proc = cli("up", "lab-small", "--add", "--node", "sparkplay-lab-rank1", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert "lab-small claims" not in proc.stderr
    assert in_node(1, "systemctl", "is-active", SMALL_UNIT).stdout.strip() == "active"
    assert in_node(0, "systemctl", "is-active", SMALL_UNIT, check=False).stdout.strip() != "active"
    # its memory claim is in its record, the one the next admission counts
    record = json.loads(in_node(1, "cat", "/etc/sparkplay/serve.d/lab-small.json").stdout)
    assert record["slot"] == "lab-small" and record["claim"]["bytes"] > 0 and "KV cache" in record["claim"]["how"]
    assert in_node(1, "stat", "-c", "%a", "/etc/sparkplay/serve.d/lab-small.env").stdout.strip() == "600"
    # the inventory's recipe stays the primary's
    assert "lab-small" not in (PROJECT / "inventory" / "lab" / "group_vars" / "all" / "sparkplay.yml").read_text()


def test_both_answer_through_the_one_endpoint_as_they_answer_directly():
    assert served() == ["lab-small", "lab-tiny"]
    tiny, small = ask("lab-tiny"), ask("lab-small")
    assert tiny["model"] == "lab-tiny" and small["model"] == "lab-small"
    # temperature 0: the gateway's answer is the engine's own, byte for byte
    assert tiny["choices"] == ask("lab-tiny", "http://127.0.0.1:9931/v1")["choices"]
    address = json.loads(in_node(1, "cat", "/etc/sparkplay/serve.d/lab-small.json").stdout)["address"]
    body = {"model": "lab-small", "messages": [{"role": "user", "content": "What is 17*23?"}], "temperature": 0,
            "max_tokens": 8, "stream": False}  # fmt: skip
    direct = json.loads(in_node(1, "curl", "-s", "-m", "20", "-H", "Content-Type: application/json", "-d",
                                json.dumps(body), f"http://{address}:9933/v1/chat/completions").stdout)  # fmt: skip
    assert small["choices"] == direct["choices"]
    stream = ask("lab-small", stream=True)
    assert stream.count("data: ") >= 3 and stream.rstrip().endswith("data: [DONE]")
    missing = ask("lab-huge")
    assert missing["error"]["code"] == "model_not_found" and "lab-small, lab-tiny" in missing["error"]["message"]
    # a request without `model` goes to the default: the primary's
    plain = json.loads(curl(f"{GATEWAY}/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                            "max_tokens": 4}))  # fmt: skip
    assert plain["model"] == "lab-tiny", plain
    # the gateway runs as a user of its own, not root, from its virtualenv
    pid = in_node(0, "systemctl", "show", "-p", "MainPID", "--value", "sparkplay-gateway.service").stdout.strip()
    owner = in_node(0, "ps", "-o", "uid=,args=", "-p", pid).stdout.split()
    assert owner[0] == in_node(0, "id", "-u", "sparkplay-gateway").stdout.strip() != "0", owner
    assert owner[1] == "/opt/sparkplay/gateway/bin/python3", owner


# what one engine's sandbox tries against its neighbour (issue 38), run as the engine runs: a transient unit
# with every [Service] setting of lab-small's own unit (its user, its sandbox)
NEIGHBOUR_PROBE = (
    ESCAPE_ATTEMPTS
    + """
pid, home = sys.argv[1], sys.argv[2]
said["list_home"] = attempt(lambda: os.listdir(home))
said["write_home"] = attempt(lambda: open(os.path.join(home, "planted.py"), "w").close())
said["environ"] = attempt(lambda: open(f"/proc/{pid}/environ", "rb").read())
said["sees_pid"] = pid in os.listdir("/proc")
said["uid"] = os.getuid()
print(json.dumps(said))
"""
)
SANDBOX_KEYS = ("User=", "Group=", "WorkingDirectory=", "Environment=HOME=", "NoNewPrivileges=", "Protect", "Private",
                "Restrict", "LockPersonality=", "CapabilityBoundingSet=", "AmbientCapabilities=", "SystemCall",
                "UMask=", "ReadWritePaths=")  # fmt: skip


def test_an_engine_cannot_see_its_neighbours_traffic_caches_or_environment():
    """lab-small (added) and lab-tiny's worker share rank 1. From inside lab-small's sandbox: no packet or raw
    socket (what read another model's bearer key on loopback), the primary engine's home (its caches) neither
    readable nor writable, the primary's process and its environment (its API key) invisible."""
    unit = in_node(1, "cat", f"/etc/systemd/system/{SMALL_UNIT}").stdout.split("[Service]", 1)[1]
    settings = [line for line in unit.splitlines() if line.startswith(SANDBOX_KEYS)]
    assert any(line.startswith("User=sparkplay-e-") for line in settings), settings
    primary = in_node(1, "systemctl", "show", "-p", "MainPID", "--value", "sparkplay-serve.service").stdout.strip()
    assert primary not in ("", "0")
    home = "/var/lib/sparkplay/engine"
    assert in_node(1, "stat", "-c", "%U %a", home).stdout.split() == ["sparkplay-engine", "750"]
    argv = ["systemd-run", "--wait", "--pipe", "--quiet", "--collect", *(f"--property={s}" for s in settings),
            "/usr/bin/python3", "-c", NEIGHBOUR_PROBE, primary, home]  # fmt: skip
    said = json.loads(in_node(1, *argv).stdout)
    assert said["packet_socket"] != "allowed" and said["raw_ip_socket"] != "allowed", said
    assert said["list_home"] == "PermissionError" and said["write_home"] != "allowed", said
    assert said["environ"] != "allowed" and said["sees_pid"] is False, said
    assert said["uid"] != int(in_node(1, "id", "-u", "sparkplay-engine").stdout)
    assert in_node(1, "test", "-e", f"{home}/planted.py", check=False).returncode == 1
    # and its own home is its own: the primary's user cannot read it either
    own = in_node(1, "stat", "-c", "%U %a", "/var/lib/sparkplay/engine@lab-small").stdout.split()
    assert own[0].startswith("sparkplay-e-") and own[1] in ("700", "750")


def test_a_third_that_cannot_fit_is_refused_naming_the_node_and_nothing_changes():
    """lab-small's model with a 256M-token context: a 128 GiB KV cache, more than the lab's host has."""
    doc = lab_small_as("lab-huge", 1 << 28, 9934)
    path = PROJECT / "recipes" / "lab-huge.yml"
    routes = in_node(0, "cat", "/etc/sparkplay/gateway-routes.json").stdout
    pids = [in_node(r, "systemctl", "show", u, "--property=MainPID").stdout
            for r, u in ((0, "sparkplay-serve.service"), (1, SMALL_UNIT))]  # fmt: skip
    try:
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        proc = cli("up", "lab-huge", "--add", "--yes")
    finally:
        path.unlink()
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "lab-huge does not fit on sparkplay-lab-rank0: it claims 128." in said, said[-3000:]
    assert "of a 268435456-token KV cache" in said and "admitted there: lab-tiny" in said
    assert "short by" in said and "Nothing was changed" in said and "--force-admit" in said
    assert in_node(0, "test", "-e", "/etc/sparkplay/serve.d/lab-huge.json", check=False).returncode == 1
    assert in_node(0, "cat", "/etc/sparkplay/gateway-routes.json").stdout == routes
    assert pids == [in_node(r, "systemctl", "show", u, "--property=MainPID").stdout
                    for r, u in ((0, "sparkplay-serve.service"), (1, SMALL_UNIT))]  # fmt: skip


def test_status_lists_every_deployment_and_a_rerun_changes_nothing():
    proc = run_cli("status", "-i", "inventory/lab", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["recipe"] for r in doc["added"]] == ["lab-small"] and doc["added"][0]["up"]
    assert all(r["up"] for r in doc["ranks"])
    gateway = doc["gateway"]
    assert (gateway["url"], gateway["keys_required"], gateway["up"], gateway["default"]) == (
        GATEWAY, False, True, "lab-tiny"), gateway  # fmt: skip
    assert gateway["models"] == ["lab-small", "lab-tiny"]
    pid = in_node(1, "systemctl", "show", SMALL_UNIT, "--property=MainPID").stdout
    # plain up of the primary keeps today's meaning, and leaves the added model serving
    proc = cli("up", "lab-tiny", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    again = cli("up", "lab-small", "--add", "--node", "sparkplay-lab-rank1", "--yes")
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr
    assert "changed" not in "".join(line for line in again.stdout.splitlines() if line.startswith(" sparkplay-lab"))
    assert "lab-small is unchanged" in full_log(again)  # an unchanged added deployment starts no stand-in
    assert in_node(1, "systemctl", "show", SMALL_UNIT, "--property=MainPID").stdout == pid
    assert served() == ["lab-small", "lab-tiny"]


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
    print(f"\nupdate beside itself: {len(codes)} requests through the gateway during a {took:.0f} s `up`, "
          f"{len(failed)} failed")  # fmt: skip
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
    assert in_node(1, "test", "-e", "/etc/systemd/system/sparkplay-serve@lab-small.NEW.service",
                   check=False).returncode == 1  # fmt: skip
    routes = json.loads(in_node(0, "cat", "/etc/sparkplay/gateway-routes.json").stdout)["models"]
    assert routes["lab-small"]["slot"] == "lab-small" and routes["lab-small"]["url"].endswith(":9933")


def test_bench_measures_one_model_of_several():
    profile = PROJECT / ".cache" / "several-bench.yml"
    profile.parent.mkdir(exist_ok=True)
    profile.write_text("pp: [32]\ntg: [8]\nconcurrency: [1, 2]\nruns: 1\ninvariance_tokens: 8\n")
    proc = cli("bench", "--model", "lab-small", "--profile", str(profile), "--results", str(profile.parent / "several"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    kept = sorted((profile.parent / "several" / "lab-small").glob("*.json"))
    assert kept and json.loads(kept[-1].read_text())["invariance"]["identical"]


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


def full_log(proc: subprocess.CompletedProcess[str]) -> str:
    """The whole run's output (the CLI shows its plays and summary, and names the file that holds the rest)."""
    found = re.findall(r"full log: (\S+)", proc.stdout + proc.stderr)
    assert found, proc.stdout[-2000:]
    return (Path(found[-1]) / "stdout").read_text()


def test_stopping_one_leaves_the_other_answering_and_frees_its_claim():
    proc = cli("stop", "lab-small", "--yes")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    assert served() == ["lab-tiny"] and ask("lab-tiny")["model"] == "lab-tiny"
    assert ask("lab-small")["error"]["code"] == "model_not_found"
    assert in_node(1, "systemctl", "is-active", SMALL_UNIT, check=False).stdout.strip() != "active"
    for gone in ("/etc/sparkplay/serve.d/lab-small.json", "/etc/sparkplay/serve.d/lab-small.env",
                 f"/etc/systemd/system/{SMALL_UNIT}"):  # fmt: skip
        assert in_node(1, "test", "-e", gone, check=False).returncode == 1, gone
    nothing = cli("stop", "lab-small", "--yes")
    assert nothing.returncode != 0 and "No deployment of recipe lab-small" in nothing.stdout + nothing.stderr


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
        assert [in_node(r, "systemctl", "is-active", "sparkplay-serve@lab-pair.service").stdout.strip()
                for r in (0, 1)] == ["active", "active"]  # fmt: skip
        worker = in_node(1, "systemctl", "show", "-p", "ExecStart", "sparkplay-serve@lab-pair.service").stdout
        assert "-p 9946" in worker, worker
        tables = in_node(1, "nft", "list", "tables").stdout
        assert "table inet sparkplay_" in tables and "table inet sparkplay\n" in tables + "\n", tables
        assert ask("lab-pair")["model"] == "lab-pair" and ask("lab-tiny")["model"] == "lab-tiny"
        claims = [json.loads(in_node(r, "cat", "/etc/sparkplay/serve.d/lab-pair.json").stdout)["claim"]["bytes"]
                  for r in (0, 1)]  # fmt: skip
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
            "root:sparkplay-gateway", "640"]  # fmt: skip
        status = json.loads(run_cli("status", "-i", "inventory/lab", "--json").stdout)
        assert status["gateway"]["keys_required"] is True
        address = json.loads(in_node(1, "cat", "/etc/sparkplay/serve.d/lab-keyed.json").stdout)["address"]
        direct = in_node(1, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-d", json.dumps(body),
                         f"http://{address}:9935/v1/chat/completions", check=False).stdout  # fmt: skip
        assert direct == "401"  # the engine's own key holds
    finally:
        settings.write_text(before)
        recipe.unlink(missing_ok=True)


ON_DEMAND = ["lab-od-a", "lab-od-b", "lab-od-c"]


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
        settings.write_text(before + f"\nserve_on_demand: {ON_DEMAND}\nserve_on_demand_ttl: 30\n"
                            "serve_on_demand_budget_gib: 2.5\n")  # fmt: skip
        for name in ON_DEMAND:
            proc = cli("up", name, "--add", "--node", "sparkplay-lab-rank1", "--yes")
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
            assert active(name) is False, name  # proven, then stopped until asked for
        claim = json.loads(in_node(1, "cat", "/etc/sparkplay/serve.d/lab-od-a.json").stdout)["claim"]["bytes"]
        assert 1.0 * 2**30 < claim < 1.25 * 2**30, claim
        took = {}
        for name in ON_DEMAND:  # a, then b beside it, then c: a (the least recently used) makes room
            started = time.monotonic()
            out = in_node(0, "curl", "-sN", "-m", "60", "-H", "Content-Type: application/json", "-d",
                          json.dumps({"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                                      "stream": True}), f"{GATEWAY}/chat/completions", check=False).stdout  # fmt: skip
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
        for _ in range(60):  # idle past the TTL (30 s): b and c stop
            if not any(active(n) for n in ON_DEMAND):
                break
            time.sleep(2)
        assert [active(n) for n in ON_DEMAND] == [False, False, False]
        assert "idle for 30 s (its TTL)" in in_node(0, "journalctl", "-u", "sparkplay-gateway", "--no-pager",
                                                    "-o", "cat").stdout  # fmt: skip
    finally:
        settings.write_text(before)
        for path in recipes:
            path.unlink(missing_ok=True)


def active(name: str) -> bool:
    return (
        in_node(1, "systemctl", "is-active", f"sparkplay-serve@{name}.service", check=False).stdout.strip() == "active"
    )
