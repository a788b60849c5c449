"""The gateway's cluster page (GET /ui, /ui/state, /ui/FILE) on a real gateway in this process, in front of the
stand-in engines and swapper of tests/test_gateway_demand.py: what /ui/state says of each model as it is
stopped, asked for, serving and evicted; the charts' figures from the gateway's own metrics; the events; the
page's files (its own and the vendored chart library, held to their hashes) and nothing from elsewhere; the
gateway's keys in front of all of it. The page in a real browser on the lab is tests/test_ui_browser_lab.py."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from sparkplay.nodetools import app
from sparkplay.nodetools.serve import gateway_nodes, gateway_ui
from tests.test_gateway import engines, serve, write_routes  # noqa: F401 - a fixture used below
from tests.test_gateway_demand import ask, lab  # noqa: F401 - a fixture used below

UI = Path(gateway_ui.__file__).parent / "ui"
VENDORED = {
    "uPlot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
    "uPlot.min.css": "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
}


def get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    reply = conn.getresponse()
    return reply.status, reply.read(), dict(reply.getheaders())


@contextlib.contextmanager
def coder_gateway(tmp_path: Path, stand_ins: dict, *extra: str) -> Iterator[int]:
    """A gateway in front of the `coder` stand-in alone: its port."""
    routes = tmp_path / "routes.json"
    write_routes(routes, {"coder": stand_ins["coder"][0]})
    port, stop = serve(routes, *extra)
    try:
        yield port
    finally:
        stop()


def state(port: int) -> dict:
    status, body, _ = get(port, "/ui/state")
    assert status == 200, body
    return json.loads(body)


def models(port: int) -> dict[str, dict]:
    return {m["name"]: m for m in state(port)["models"]}


def test_ui_state_follows_models_on_demand_from_stopped_to_serving_and_evicted(lab):  # noqa: F811
    _, port, _ = lab(budget=int(1.5 * 2**30), ttl=600)
    seen = models(port)
    assert set(seen) == {"alpha", "beta", "gamma"}
    assert all(
        m["on_demand"] and m["node"] == "n1" and m["state"] in ("unknown", "stopped on demand") for m in seen.values()
    )
    assert ask(port, "alpha")[0] == 200
    now = models(port)["alpha"]
    assert now["state"] == "serving" and now["receipt"]["since"] == "asked for"
    assert 590 <= now["ttl_left_s"] <= 600 and now["cause"] is None
    assert ask(port, "beta")[0] == 200  # one fits: alpha makes room
    now = models(port)
    assert now["beta"]["state"] == "serving" and now["alpha"]["state"] == "stopped on demand"
    assert now["alpha"]["ttl_left_s"] is None
    events = [e["what"] for e in state(port)["events"]]
    assert events[0].startswith("beta answers") and "stopping alpha: evicted (least recently used)" in " ".join(events)
    assert all(isinstance(e["at"], float) for e in state(port)["events"])


def test_the_charts_read_requests_errors_and_latency_from_the_gateways_metrics(tmp_path, engines):  # noqa: F811
    with coder_gateway(tmp_path, engines) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for tokens in (4, 4, 4, -1):  # three answers and an engine's 400
            conn.request(
                "POST",
                "/v1/chat/completions",
                body=json.dumps({"model": "coder", "max_tokens": tokens}),
                headers={"Content-Type": "application/json"},
            )
            conn.getresponse().read()
        history = []
        for _ in range(80):  # a point each five seconds
            history = models(port)["coder"]["history"]
            if history and history[-1]["requests"]:
                break
            time.sleep(0.1)
        point = history[-1]
        assert point["requests"] == 4 and point["errors"] == 1, history
        assert 0 < point["latency_p50"] <= point["latency_p95"] <= 10 and point["first_byte_p95"] is not None


def test_quantiles_come_from_the_bucket_that_holds_them():
    buckets = [(0.1, 2.0), (0.5, 9.0), (1.0, 10.0), (float("inf"), 10.0)]
    assert gateway_ui._quantile(buckets, 0.5) == 0.5 and gateway_ui._quantile(buckets, 0.95) == 1.0
    assert gateway_ui._quantile([(0.1, 0.0), (float("inf"), 0.0)], 0.5) is None
    assert gateway_ui._quantile([(0.1, 0.0), (float("inf"), 3.0)], 0.5) is None  # past the last bound


def test_the_page_and_its_files_are_served_and_nothing_else_is_asked_for(tmp_path, engines):  # noqa: F811
    with coder_gateway(tmp_path, engines) as port:
        status, page, headers = get(port, "/ui")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        linked = re.findall(r'(?:src|href)="([^"]+)"', page.decode())
        assert linked and all(link.startswith("/ui/") for link in linked), linked
        for link in linked:
            assert get(port, link)[0] == 200, link
        for name in ("index.html", "app.js", "page.css"):  # no address outside the gateway in the page's own
            assert not re.search(r"https?://", (UI / name).read_text()), name
        for name, digest in VENDORED.items():
            assert hashlib.sha256((UI / name).read_bytes()).hexdigest() == digest, name
            assert get(port, f"/ui/{name}")[1] == (UI / name).read_bytes()
        for bad in ("/ui/../gateway.py", "/ui/__init__.py", "/ui/LICENSE.uPlot%00", "/ui/ui/app.js"):
            assert get(port, bad)[0] == 404, bad


def test_the_page_is_behind_the_gateways_keys(tmp_path, engines):  # noqa: F811
    keys = tmp_path / "keys"
    keys.write_text("sk-page-key-0123456789abcdef\n")
    keys.chmod(0o600)
    with coder_gateway(tmp_path, engines, "--keys", str(keys)) as port:
        for path in ("/ui", "/ui/state", "/ui/app.js"):
            assert get(port, path)[0] == 401, path
        status, body, _ = get(port, "/ui/state", {"Authorization": "Bearer sk-page-key-0123456789abcdef"})
        assert status == 200 and [m["name"] for m in json.loads(body)["models"]] == ["coder"]


def test_the_serve_tool_carries_the_page_and_reads_it_from_inside_its_zip():
    tool = app("serve")
    names = zipfile.ZipFile(tool).namelist()
    for name in ("index.html", "app.js", "page.css", *VENDORED, "LICENSE.uPlot"):
        assert f"serve/ui/{name}" in names, name
    # as the gateway runs on a node: its modules and the page's files from the zipapp alone
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from serve import gateway_ui; "
        "print(len(gateway_ui.asset('app.js')[0]))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code, tool], capture_output=True, text=True, check=True)
    assert int(out.stdout) == len((UI / "app.js").read_bytes())
    assert gateway_ui.asset("../gateway.py") is None and gateway_ui.asset("VENDORED.md") is None


def test_the_leaders_twins_come_from_the_fabric_env_file_it_is_given(tmp_path):
    env = tmp_path / "fabric.env"
    env.write_text('NCCL_SOCKET_IFNAME=x\nSPARKPLAY_FABRIC_TWINS="sp-no-such-twin0,../sp-no-such-twin1"\n')
    twins = gateway_nodes.twins(env)
    assert twins == [
        {"name": "sp-no-such-twin0", "carrier": False},
        {"name": "../sp-no-such-twin1", "carrier": False},  # read as /sys/class/net/sp-no-such-twin1 only
    ]
    assert gateway_nodes.twins(None) == [] and gateway_nodes.twins(tmp_path / "gone") == []


def test_each_node_shows_its_counted_claims_and_the_gateways_node_its_engines_use(tmp_path, engines, monkeypatch):  # noqa: F811
    """The routes carry each node's MemTotal, reserve and claims (node_memory.py); the gateway adds, for its own
    node, the memory available and each of its engines' use against its limit, read from the cgroup."""
    from sparkplay.nodetools.serve import memory

    group = tmp_path / "cg" / "system.slice" / "sparkplay-serve.service"
    group.mkdir(parents=True)
    (group / "memory.current").write_text("300000000\n")
    (group / "memory.max").write_text("800000000\n")
    monkeypatch.setattr(memory, "CGROUP2", tmp_path / "cg")
    monkeypatch.setitem(memory._GROUPS, "sparkplay-serve.service", "/system.slice/sparkplay-serve.service")
    gib = 2**30
    routes = tmp_path / "routes.json"
    routes.write_text(
        json.dumps(
            {
                "models": {
                    "coder": {"url": engines["coder"][0], "recipe": "coder", "host": "n0"}
                    | {"unit": "sparkplay-serve.service"},
                    "chat": {"url": engines["chat"][0], "recipe": "chat", "host": "n1", "slot": "chat"}
                    | {"on_demand": True, "claim": 3 * gib, "units": ["sparkplay-serve@chat.service"]},
                },
                "budgets": {"n0": 10 * gib, "n1": 5 * gib},
                "nodes": {
                    "n0": {"total_bytes": 24 * gib, "reserve_bytes": 4 * gib, "claims": {"coder": 2 * gib}},
                    "n1": {
                        "total_bytes": 12 * gib,
                        "reserve_bytes": 4 * gib,
                        "claims": {"coder": gib, "chat": 3 * gib},
                    },
                },
            }
        )
    )
    port, stop = serve(routes, "--node", "n0")
    try:
        nodes = {n["name"]: n for n in state(port)["nodes"]}
    finally:
        stop()
    here, there = nodes["n0"], nodes["n1"]
    assert here["here"] and not there["here"]
    assert here["total_bytes"] == 24 * gib and here["on_demand_budget_bytes"] == 10 * gib
    assert here["memory"]["total_bytes"] > 0  # this machine's /proc/meminfo: live
    assert here["claims"] == [
        {"model": "coder", "bytes": 2 * gib, "on_demand": False, "state": "serving"}
        | {"use": {"use_bytes": 300000000, "limit_bytes": 800000000}}
    ]
    # another node: what admission counted; an on-demand model not serving holds nothing; no live figures
    assert there["counted_bytes"] == gib and "memory" not in there
    assert [c["model"] for c in there["claims"]] == ["chat", "coder"] and "use" not in there["claims"][0]
