"""What one rank lays on its node (sparkplay.layout): the serve role writes, starts and checks exactly
this, so each rule is tested here, on plans the Deployment computes for the catalog's recipes."""

from __future__ import annotations

import json

import pytest
import yaml

from sparkplay import layout, settings
from tests.conftest import PROJECT
from tests.test_deployment import two_stage


def lay(name: str, settings: dict | None = None, rank: int = 0, claim: dict | None = None, **layout_settings):
    full = two_stage(name, settings)
    plan = full["launch"]
    return plan, layout.rank_layout(plan, plan["ranks"][rank], full, layout_settings, claim)


def test_the_serve_roles_defaults_are_the_layouts():
    ansible = yaml.safe_load((PROJECT / "roles/serve/defaults/main.yml").read_text())
    given = {k: v for k, v in layout.LAYOUT_DEFAULTS.items() if k != "serve_watchdog_state"}
    assert {k: ansible[k] for k in given} == given
    assert settings.SETTINGS["layout"] == tuple(layout.LAYOUT_DEFAULTS)


def test_the_leader_of_a_pair_writes_its_units_env_and_record_and_watches_its_workers():
    plan, got = lay("lab-tiny")
    paths = [f["path"] for f in got["files"]]
    assert paths[0] == layout.LAYOUT_DEFAULTS["serve_tool"] and paths[-1] == "/etc/sparkplay/serve.json"
    assert got["units"][0] == plan["unit"] == "sparkplay-serve.service"
    assert got["watchdog"]["wanted"] and got["watchdog"]["unit"] in got["units"]
    assert got["watchdog"]["metrics_port"] == 9899  # the primary's watchdog exports the node's metrics
    assert not got["firewall"]["wanted"]  # the leader listens for no peer
    env = next(f for f in got["files"] if f["path"] == plan["env_file"])
    assert env["mode"] == "0600" and env["secret"] is True
    kinds = ["unit", "watch", "watchdog"]  # the leader's watch unit follows the workers' units
    assert [t["template"] for t in got["templates"]] == [layout.TEMPLATES[k] for k in kinds]
    assert got["peers"] == [plan["ranks"][1]["address"]]
    assert got["ready_argv"][-1] == f"--peer={plan['ranks'][1]['address']}"
    assert got["restart_paths"][:2] == [plan["env_file"], got["unit_path"]]


def test_a_worker_guards_its_inter_rank_port_and_runs_no_watchdog():
    plan, got = lay("lab-tiny", rank=1)
    assert got["firewall"]["wanted"] and got["units"][:2] == [plan["unit"], plan["firewall"]["unit"]]
    assert "nftables" in got["packages"]
    wall = next(f for f in got["files"] if f["path"] == plan["firewall"]["file"])
    assert wall["validate"].endswith("--check --file %s")
    assert {plan["firewall"]["file"], got["firewall"]["path"]} <= set(got["managed_paths"])
    assert got["last_good"]["ready_argv"] is None  # only the leader checks the model answers


def test_an_added_deployment_keeps_its_own_watchdog_state_and_exports_no_metrics():
    _, got = lay("lab-small", {"serve_mode": "add", "serve_node": "rank1"})
    assert got["watchdog"]["metrics_port"] == 0 and "python3-prometheus-client" not in got["packages"]
    assert got["watchdog"]["state"].endswith("watchdog@lab-small.json")


def test_the_memory_guard_limit_comes_from_the_claim_and_goes_when_turned_off():
    claim = {"bytes": 2**30, "how": "x"}
    assert lay("lab-tiny", claim=claim)[1]["memory_limit"]["high"] == 2**30
    for off in (False, "false", "no"):
        assert lay("lab-tiny", claim=claim, serve_memory_guard=off)[1]["memory_limit"] is None
    assert lay("lab-tiny")[1]["memory_limit"] is None  # no claim known, no limit


def test_the_record_is_written_as_ansibles_to_nice_json_writes_it():
    plan, got = lay("lab-tiny", claim={"how": "é", "bytes": 1})
    text = got["files"][-1]["content"]
    assert json.loads(text)["claim"] == {"how": "é", "bytes": 1}
    assert text == json.dumps(
        {**plan["ranks"][0]["record"], "claim": {"bytes": 1, "how": "é"}},
        indent=4,
        sort_keys=True,
        separators=(",", ": "),
    )
    assert "\\u00e9" in text  # ASCII, as Ansible's filter writes it


def test_the_settings_reach_the_readiness_check():
    plan, got = lay("lab-tiny", serve_wait_interval=5, serve_smoke_max_tokens=3, serve_tool="/opt/t")
    argv = got["ready_argv"]
    assert argv[0] == "/opt/t" and argv[argv.index("--interval") + 1] == "5"
    assert argv[argv.index("--max-tokens") + 1] == "3"
    assert argv[argv.index("--timeout") + 1] == str(plan["health"]["timeout_s"])
    quick = got["quick_ready_argv"]
    assert quick[quick.index("--timeout") + 1] == str(layout.QUICK_READY_S)


def test_units_are_filled_in_from_their_rendered_text_and_a_missing_one_is_refused():
    _, got = lay("lab-tiny", rank=1)
    rendered = {t["path"]: f"[Unit] {t['template']}" for t in got["templates"]}
    files = layout.files_with_units(got, rendered)
    assert [f["content"] for f in files if f["path"] in rendered] == list(rendered.values())
    assert files[0] == got["files"][0]  # the serve tool keeps its bytes
    with pytest.raises(ValueError, match="units not rendered"):
        layout.files_with_units(got, dict(list(rendered.items())[1:]))


GATEWAY = {
    "user": "sparkplay-gateway",
    "client_keys": "/etc/sparkplay/gateway/keys",
    "unit": "sparkplay-gateway.service",
}


def test_the_gateway_listens_where_told_and_a_client_on_the_leader_reaches_it():
    from sparkplay.served import gateway_layout

    launch = {"ranks": [{"role": "worker", "host": "b"}, {"role": "leader", "host": "a", "record": {}, "env": {}}]}

    def laid(bind: str) -> dict:
        return gateway_layout(launch, None, GATEWAY, [], (bind, 9930), [], "/etc/systemd/system", "/t/serve")

    assert laid("127.0.0.1")["leader_rank"]["host"] == "a"
    assert (laid("127.0.0.1")["listen"], laid("127.0.0.1")["client"]) == ("127.0.0.1:9930", "127.0.0.1")
    assert (laid("::1")["listen"], laid("::1")["client"]) == ("[::1]:9930", "[::1]")
    assert (laid("0.0.0.0")["listen"], laid("0.0.0.0")["client"]) == ("0.0.0.0:9930", "127.0.0.1")  # noqa: S104
    assert laid("127.0.0.1")["unit_path"] == "/etc/systemd/system/sparkplay-gateway.service"
    assert laid("127.0.0.1")["secret_files"] == []  # no keys asked, no engine key
    assert laid("127.0.0.1")["tool_file"] == layout.tool_file("/t/serve")  # on a leader that may run no rank


def test_the_gateways_secrets_are_the_keys_this_engines_key_and_the_others():
    import base64

    from sparkplay.served import gateway_layout, key_lines

    keys = key_lines("# the team\n sk-one \n\n#sk-off\nsk-two\n")
    assert keys == ["sk-one", "sk-two"]
    leader = {"role": "leader", "host": "a", "record": {"api_key_env": "K"}, "env": {"K": "mine"}}
    other = {
        "item": {"slot": "lab-b", "api_key_env": "K", "runtime": "native"},
        "content": base64.b64encode(b'K="theirs"\n').decode(),
    }
    gone = {"item": {"slot": "lab-c", "api_key_env": "K"}, "failed": True}  # its env file is gone: no key
    got = gateway_layout({"ranks": [leader]}, "lab-a", GATEWAY, keys, ("127.0.0.1", 1), [other, gone], "/u", "/t")
    wanted = [("keys", "sk-one\nsk-two\n"), ("lab-a.key", "mine\n"), ("lab-b.key", "theirs\n")]
    assert [(f["path"].rsplit("/", 1)[1], f["content"]) for f in got["secret_files"]] == wanted
    assert all(f["secret"] and f["mode"] == "0640" and f["group"] == "sparkplay-gateway" for f in got["secret_files"])


def test_the_gateway_on_every_address_is_reached_on_loopback_as_an_engine_is():
    from sparkplay.addresses import client_address
    from sparkplay.served import gateway_layout

    launch = {"ranks": [{"role": "leader", "host": "a", "record": {}, "env": {}}]}
    for bind in ("0.0.0.0", "::", "127.0.0.1", "::1", "10.0.0.5"):  # noqa: S104
        got = gateway_layout(launch, None, GATEWAY, [], (bind, 9930), [], "/u", "/t")
        assert got["client"] == client_address(bind)
    assert client_address("::") == "[::1]"


@pytest.mark.parametrize("rank", [0, 1])
def test_a_kept_deployment_goes_back_only_as_up_would_let_it(rank):
    """Rollback used the record's paths, units and command as they were, and asked no allow (issue 54)."""
    _, got = lay("lab-tiny", rank=rank)
    files = [{**f, "content": "x"} if "content" not in f and "content_base64" not in f else f for f in got["files"]]
    doc = json.loads(layout.last_good_text(got, files))
    tool, places = layout.LAYOUT_DEFAULTS["serve_tool"], ["/etc/sparkplay", "/var/lib/sparkplay", "/etc/sparkplay"]
    assert doc["privileged"] == [] and layout.rollback_refusal(doc, [], places, tool) is None
    asked = {**doc, "privileged": ["env:ACME_TUNING"]}
    assert "env:ACME_TUNING, which serve_allow no longer grants" in layout.rollback_refusal(asked, [], places, tool)
    assert layout.rollback_refusal(asked, ["env:ACME_TUNING"], places, tool) is None
    older = {k: v for k, v in doc.items() if k != "privileged"}
    assert "predates the record" in layout.rollback_refusal(older, [], places, tool)
    for path in ("/etc/cron.d/sparkplay", "/etc/sparkplay/../cron.d/x", "/etc/systemd/system/evil.service"):
        moved = {**doc, "files": [*doc["files"], {"path": path, "content": "x"}]}
        assert "outside sparkplay's own places" in layout.rollback_refusal(moved, [], places, tool), path
    assert "no unit sparkplay writes" in layout.rollback_refusal({**doc, "unit": "ssh.service"}, [], places, tool)
    if rank == 0:
        ready = {**doc, "ready_argv": ["/bin/sh", "-c", "id"]}
        assert "not sparkplay's serve tool" in layout.rollback_refusal(ready, [], places, tool)
    assert layout.rollback_refusal(None, [], places, tool) is None  # nothing kept: nothing to refuse
