"""Several deployments on one cluster: names per slot, placement, the admission of a launch plan against the
records the nodes keep, the gateway's routes, and the nodes' GGUF header reader (no lab)."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import pytest

# Ansible's collection loader first (tests/role_render.py): a plain import of ansible_collections before it
# leaves the package half-known, and every role rendered later in the same process misses the filters
import tests.role_render  # noqa: F401
from sparkplay import admission, deployment, kvcache, served
from sparkplay.admission import GIB
from sparkplay.engines import names, registry
from sparkplay.errors import BadInput
from sparkplay.lab import tiny_gguf
from tests.conftest import PROJECT
from tests.test_deployment import facts_of, recipe

sys.path.insert(0, str(PROJECT / "collections"))
from ansible_collections.sparkplay.spark.plugins.module_utils import sparkplay_gguf, sparkplay_probe

RANKS = {"rank0": 0, "rank1": 1}


def meminfo(total_gib: float, available_gib: float) -> str:
    kib = 1024 * 1024
    return f"MemTotal: {int(total_gib * kib)} kB\nMemFree: 1 kB\nMemAvailable: {int(available_gib * kib)} kB\n"


def staged(name: str, settings: dict | None = None) -> dict:
    doc = recipe(name)
    one = deployment.compute(doc, RANKS, settings)
    return deployment.with_launch(one, doc, facts_of(2), settings)


# -- names and placement ---------------------------------------------------------------------------------


def test_the_primary_keeps_todays_names_and_an_added_deployment_carries_its_recipes():
    primary = names.for_slot(None)
    assert primary["units"]["serve"] == "sparkplay-serve.service" and primary["container"] == "sparkplay-serve"
    assert primary["env_file"] == "/etc/sparkplay/serve.env" and primary["record"] == "/etc/sparkplay/serve.json"
    added = names.for_slot("lab-small")
    assert added["units"] == {
        "watchdog": "sparkplay-serve-watchdog@lab-small.service",
        "watch": "sparkplay-serve-watch@lab-small.service",
        "serve": "sparkplay-serve@lab-small.service",
        "firewall": "sparkplay-peer-firewall@lab-small.service",
    }
    assert added["record"] == "/etc/sparkplay/serve.d/lab-small.json"
    assert added["env_file"] == "/etc/sparkplay/serve.d/lab-small.env"
    assert added["container"] == "sparkplay-serve-lab-small"
    # every name differs from the primary's: nothing of one deployment overwrites the other's
    assert not {json.dumps(v) for v in added.values()} & {json.dumps(v) for v in primary.values() if v}


def test_plain_up_plans_what_it_planned_before():
    got = staged("lab-tiny")
    assert got["mode"] == "replace" and got["slot"] is None
    assert [n["host"] for n in got["nodes"]] == ["rank0", "rank1"]
    assert got["launch"]["unit"] == "sparkplay-serve.service" and got["paths"]["serve_record"] == names.RECORD
    assert got["launch"]["ranks"][0]["record"]["slot"] is None


def test_an_added_deployment_runs_on_one_node_with_its_own_names_and_state():
    got = staged("lab-small", {"serve_mode": "add", "serve_node": "rank1"})
    assert got["slot"] == "lab-small" and got["nodes"] == [{"host": "rank1", "rank": 0, "role": "leader"}]
    launch = got["launch"]
    (rank,) = launch["ranks"]
    assert rank["host"] == "rank1" and launch["unit"] == "sparkplay-serve@lab-small.service"
    assert launch["env_file"] == "/etc/sparkplay/serve.d/lab-small.env"
    assert rank["units"] == ["sparkplay-serve@lab-small.service", "sparkplay-serve-watchdog@lab-small.service"]
    assert rank["record"]["watchdog_state"] == "/var/lib/sparkplay/watchdog@lab-small.json"
    assert (
        rank["record"]["slot"] == "lab-small"
        and got["paths"]["serve_record"] == "/etc/sparkplay/serve.d/lab-small.json"
    )
    # off the leader, loopback would hide it from the gateway: it listens on its own cable address
    assert launch["api"]["bind"] == facts_of(2)["rank1"]["fabric_env"]["SPARKPLAY_FABRIC_ADDRESSES"].split(",")[0]
    on_leader = staged("lab-small", {"serve_mode": "add"})
    assert on_leader["nodes"][0]["host"] == "rank0" and on_leader["launch"]["api"]["bind"] == "127.0.0.1"
    # an address the inventory widened stays; the gateway reaches it on the cable all the same
    wide = staged("lab-small", {"serve_mode": "add", "serve_node": "rank1", "serve_bind": "0.0.0.0"})["launch"]["api"]  # noqa: S104
    assert wide["bind"] == "0.0.0.0" and wide["url"] == f"http://{launch['api']['bind']}:9933"  # noqa: S104


def test_an_added_docker_deployment_gets_its_own_container_and_env_file():
    doc = recipe("glm53")
    doc = {**doc, "topology": {**doc["topology"], "nodes": 1, "tensor_parallel": 1}}
    doc["serve"] = {**doc["serve"], "args": [a for a in doc["serve"]["args"]]}
    try:
        one = deployment.compute(doc, RANKS, {"serve_mode": "add"})
        launch = deployment.with_launch(one, doc, facts_of(2), {"serve_mode": "add"})["launch"]
    except BadInput as refused:  # the seed's flags may need two ranks; the names are what is tested
        pytest.skip(str(refused))
    argv = launch["ranks"][0]["exec"]
    assert argv[argv.index("--name") + 1] == "sparkplay-serve-glm53" == launch["container"]
    assert argv[argv.index("--env-file") + 1] == "/etc/sparkplay/serve.d/glm53.env"


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("lab-vllm", {"serve_mode": "add", "serve_node": "rank1"}, "serve_node rank1 places a one-node deployment"),
        (
            "lab-small",
            {"serve_mode": "add", "serve_node": "elsewhere"},
            "serve_node elsewhere is not in sparkplay_nodes",
        ),
        ("lab-tiny", {"serve_node": "rank1"}, "serve_node rank1 places an added deployment only"),
        ("lab-tiny", {"serve_mode": "both"}, "serve_mode 'both' is not a mode"),
        ("lab-small", {}, "runs on 1 node(s) but the inventory has 2"),
    ],
)
def test_placement_mistakes_are_one_line_errors(name, settings, message):
    with pytest.raises(BadInput, match=re_escape(message)):
        deployment.compute(recipe(name), RANKS, settings)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# -- admission of a launch plan beside the records --------------------------------------------------------


def record_of(launch: dict, host_claims: dict) -> list[dict]:
    found = []
    for rank in launch["ranks"]:
        text = json.dumps({**rank["record"], "claim": host_claims.get(rank["host"])})
        slot = rank["record"].get("slot")
        path = names.for_slot(slot)["record"] if slot else "/etc/sparkplay/serve.json"
        found += served.records({rank["host"]: {path: text}})
    return found


def gguf_header(layers: int = 4, heads: int = 4, hidden: int = 128) -> dict:
    return {
        "general.architecture": "llama",
        "llama.block_count": layers,
        "llama.attention.head_count": heads,
        "llama.embedding_length": hidden,
    }


def hosts(total: float = 121, available: float = 110, weights: int = 3 * 2**20) -> dict:
    return {h: {"meminfo": meminfo(total, available), "weights": weights, "gguf": gguf_header()} for h in RANKS}


def test_the_primary_alone_is_not_checked_but_its_claim_is_kept_for_later():
    launch = staged("lab-tiny")["launch"]
    got = admission.decide(launch, hosts(available=0.1), [])  # no memory free at all: not checked, as before
    assert got["checked"] is False and set(got["claims"]) == {"rank0", "rank1"}
    per_token = kvcache.kv_bytes_per_token(gguf_header())
    share = -(-3 * 2**20 // 2)
    assert (
        got["claims"]["rank0"]["bytes"] == share + -(-512 * per_token // 2) + registry.spec("llamacpp").overhead_bytes
    )


def test_an_added_llamacpp_deployment_fits_beside_the_primary_and_counts_its_claim():
    primary = staged("lab-tiny")["launch"]
    found = record_of(primary, {"rank0": {"bytes": 10 * GIB, "how": "x"}, "rank1": {"bytes": 10 * GIB, "how": "y"}})
    small = staged("lab-small", {"serve_mode": "add", "serve_node": "rank1"})["launch"]
    got = admission.decide(small, hosts(), found)
    assert got["checked"] and list(got["claims"]) == ["rank1"] and got["warnings"] == []
    # the same beside a primary claiming nearly all of rank1: refused naming the node, the claims, the shortfall
    found = record_of(primary, {"rank0": {"bytes": GIB, "how": "x"}, "rank1": {"bytes": 116.8 * GIB, "how": "y"}})
    with pytest.raises(BadInput) as refused:
        admission.decide(small, hosts(), found)
    line = str(refused.value)
    assert "lab-small does not fit on rank1" in line and "admitted there: lab-tiny 116.8 GiB" in line
    assert "short by" in line and "Nothing was changed" in line
    # on rank0, where the primary claims little, it fits: the rule is per node
    assert admission.decide(staged("lab-small", {"serve_mode": "add"})["launch"], hosts(), found)["checked"]
    # and the override lets it through, saying so
    assert admission.decide(small, hosts(), found, force=True)["warnings"][0].startswith("lab-small does not fit")


def test_memory_in_use_now_refuses_even_with_no_claims_recorded():
    """An upgrade from before claims were recorded: MemAvailable still sees what runs."""
    small = staged("lab-small", {"serve_mode": "add"})["launch"]
    with pytest.raises(BadInput, match=r"MemAvailable 204\.8 MiB"):
        admission.decide(small, hosts(available=0.2), [])


def test_a_vllm_cpu_build_claims_its_weights_and_kv_cache_space():
    launch = staged("lab-vllm")["launch"]
    got = admission.decide(launch, hosts(weights=4 * GIB), [])["claims"]["rank0"]
    assert (
        got["bytes"] == 2 * GIB + GIB + registry.spec("vllm").overhead_bytes
    )  # VLLM_CPU_KVCACHE_SPACE 1 (GiB), half the weights
    assert "VLLM_CPU_KVCACHE_SPACE" in got["how"]


def test_a_redeploy_gets_its_own_memory_back():
    small = staged("lab-small", {"serve_mode": "add"})["launch"]
    mine = record_of(small, {"rank0": {"bytes": 2 * GIB, "how": "x"}})
    # 1 GiB free now, but the running lab-small holds 2 GiB that its restart frees
    assert admission.decide(small, hosts(available=4 + 1), mine)["checked"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"recipe": "lab-small", "slot": "other"}, "lab-small is already served on rank0"),
        ({"served_name": "lab-small"}, "served name lab-small is already recipe lab-tiny"),
        ({"api_url": "http://127.0.0.1:9933"}, "port 9933 on rank0 is recipe lab-tiny (primary)'s API"),
    ],
)
def test_names_and_ports_two_deployments_would_share_are_refused(change, message):
    small = staged("lab-small", {"serve_mode": "add"})["launch"]
    primary = staged("lab-tiny")["launch"]["ranks"][0]["record"]
    path = names.for_slot(change["slot"])["record"] if "slot" in change else "/etc/sparkplay/serve.json"
    found = served.records({"rank0": {path: json.dumps({**primary, **change})}})
    with pytest.raises(BadInput, match=re_escape(message)):
        admission.decide(small, hosts(), found)


def test_one_naming_rule_for_the_gateways_default_and_admission():
    """Issue 54: the default matched a served name or a recipe's, admission compared served names only, so a
    recipe serving another recipe's name took the default. Now a name (served or recipe) is one deployment's,
    and the default prefers a served name, taking a recipe's only when one deployment runs it."""
    small = staged("lab-small", {"serve_mode": "add"})["launch"]
    posing = {**small, "served_name": "lab-tiny-chat"}  # lab-small served under another recipe's name
    primary = staged("lab-tiny")["launch"]["ranks"][0]["record"]
    found = served.records({"rank0": {"/etc/sparkplay/serve.json": json.dumps({**primary, "recipe": "lab-tiny-chat"})}})
    with pytest.raises(
        BadInput, match=re_escape("served name lab-tiny-chat is already recipe lab-tiny-chat (primary)'s")
    ):
        admission.decide(posing, hosts(), found)
    table = served.routes(
        [
            {
                "role": "leader",
                "slot": None,
                "served_name": "lab-tiny",
                "recipe": "chat",
                "api_url": "http://127.0.0.1:1",
            },
            {"role": "leader", "slot": "a", "served_name": "chat", "recipe": "a", "api_url": "http://127.0.0.1:2"},
        ],
        default="chat",
    )
    assert table["default"] == "chat"  # the served name, not the recipe of another deployment
    twice = [
        {"role": "leader", "slot": None, "served_name": "p", "recipe": "r", "api_url": "http://127.0.0.1:1"},
        {"role": "leader", "slot": "b", "served_name": "q", "recipe": "r", "api_url": "http://127.0.0.1:2"},
    ]
    assert served.routes(twice, default="r")["default"] == "p"  # a recipe two run names none: the primary's


def test_the_gateways_port_is_refused_to_a_deployment():
    small = staged("lab-small", {"serve_mode": "add", "serve_port": 9930})["launch"]
    with pytest.raises(BadInput, match="port 9930 on rank0 is the gateway's"):
        admission.decide(small, hosts(), [], gateway=["rank0", 9930])


# -- the records read back, the gateway's routes -----------------------------------------------------------


def test_routes_follow_the_leaders_records_less_what_is_replaced_or_stopped():
    tiny = staged("lab-tiny")["launch"]
    small = staged("lab-small", {"serve_mode": "add", "serve_node": "rank1"})["launch"]
    found = record_of(tiny, {})
    routes = served.routes(found, [small["slot"]], small["ranks"][0]["record"], "rank1")["models"]
    assert routes["lab-tiny"]["url"] == "http://127.0.0.1:9931" and routes["lab-tiny"]["host"] == "rank0"
    assert routes["lab-small"]["url"].endswith(":9933") and routes["lab-small"]["slot"] == "lab-small"
    found += record_of(small, {})
    assert set(served.routes(found, ["lab-small"])["models"]) == {"lab-tiny"}  # stopped
    assert set(served.routes(found, [None])["models"]) == {"lab-small"}  # the primary stopped


def test_a_record_that_is_not_json_is_named():
    with pytest.raises(BadInput, match=re_escape("rank0:/etc/sparkplay/serve.d/x.json is not a deployment record")):
        served.records({"rank0": {"/etc/sparkplay/serve.d/x.json": "{"}})
    assert served.records({"rank0": {"/etc/sparkplay/serve.json": None}}) == []


# -- on the node: sizes, records, the GGUF header ----------------------------------------------------------


def test_the_probe_measures_folders_without_following_links_and_reads_only_records(tmp_path: Path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a").write_bytes(b"x" * 10)
    (tmp_path / "m" / "sub").mkdir()
    (tmp_path / "m" / "sub" / "b").write_bytes(b"y" * 5)
    (tmp_path / "big").write_bytes(b"z" * 1000)
    (tmp_path / "m" / "link").symlink_to(tmp_path / "big")
    (tmp_path / "m" / "loop").symlink_to(tmp_path / "m")
    got = sparkplay_probe.sizes([str(tmp_path / "m"), str(tmp_path / "big"), str(tmp_path / "none")])
    assert got == {str(tmp_path / "m"): 15, str(tmp_path / "big"): 1000, str(tmp_path / "none"): None}
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "r.json").write_text("{}")
    (tmp_path / "d" / "r.env").write_text("SECRET=1")
    (tmp_path / "d" / "l.json").symlink_to(tmp_path / "big")
    assert sparkplay_probe.read_dir([str(tmp_path / "d"), str(tmp_path / "nope")]) == {
        str(tmp_path / "d" / "r.json"): "{}"
    }


def test_the_probe_reads_json_documents_and_a_damaged_one_as_none(tmp_path):
    (tmp_path / "ok.json").write_text('{"a": [1]}')
    (tmp_path / "half.json").write_text('{"a": [1')  # a crash mid-write
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "big.json").write_text(" " * (1 << 20) + "{}")
    assert sparkplay_probe.read_json(str(tmp_path / "ok.json")) == {"a": [1]}
    for name in ("half.json", "bin.json", "absent.json"):
        assert sparkplay_probe.read_json(str(tmp_path / name)) is None
    with pytest.raises(ValueError, match="larger than"):  # bounded: a huge file is refused, not read
        sparkplay_probe.read_json(str(tmp_path / "big.json"))


def test_the_nodes_gguf_reader_agrees_with_llamacpps_own(tmp_path: Path):
    for params in ({}, {k: v for k, v in tiny_gguf.SMALL.items()}):
        model = tiny_gguf.write(tmp_path / f"{params.get('name', 'tiny')}.gguf", **params)
        header = sparkplay_gguf.header_fields(str(model), kvcache.HEADER_KEYS)
        assert kvcache.kv_bytes_per_token(header) == kvcache.kv_per_token(model)
    assert sparkplay_gguf.headers([str(tmp_path / "absent.gguf")], kvcache.HEADER_KEYS) == {
        str(tmp_path / "absent.gguf"): None
    }
    # the probe module (node side, stdlib and module_utils only) keeps its own copy of the fields: the same
    probe = (PROJECT / "plugins" / "modules" / "sparkplay_probe.py").read_text()
    assert all(f'    "{key}",' in probe for key in kvcache.HEADER_KEYS)


def _gguf(*entries: bytes, count: int | None = None, magic: bytes = b"GGUF", version: int = 3) -> bytes:
    n = len(entries) if count is None else count
    return magic + struct.pack("<IQQ", version, 0, n) + b"".join(entries)


def _key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGML" + b"\0" * 20, "is not a GGUF file"),
        (_gguf(version=9), "GGUF version 9"),
        (_gguf(count=1 << 40), "claims 1099511627776 metadata entries"),
        (_gguf(struct.pack("<Q", 1 << 40)), "a string of 1099511627776 bytes"),
        (_gguf(_key("general.architecture") + struct.pack("<I", 8) + struct.pack("<Q", 1 << 30)), "a string of"),
        (_gguf(_key("x") + struct.pack("<IIQ", 9, 4, 1 << 40)), "an array of 1099511627776 items"),
        (_gguf(_key("x") + struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 4, 1)), "value type 9"),
        (_gguf(_key("x") + struct.pack("<I", 77)), "value type 77"),
        (_gguf(_key("llama.block_count") + struct.pack("<I", 4) + b"\1"), "ends early"),
        (_gguf(count=3), "ends early"),
    ],
)
def test_a_hostile_gguf_header_is_refused_without_reading_far(tmp_path: Path, data: bytes, message: str):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(sparkplay_gguf.GGUFError, match=re_escape(message)):
        sparkplay_gguf.header_fields(str(path), kvcache.HEADER_KEYS)


def test_a_header_missing_its_counts_is_a_clear_refusal():
    with pytest.raises(BadInput, match="rank0's model: its GGUF header lacks the layer or head counts"):
        kvcache.kv_bytes_per_token({"general.architecture": "llama", "llama.block_count": True}, where="rank0's model")


def test_meminfo_is_read_in_bytes():
    assert admission.meminfo(meminfo(2, 1)) == (2 * GIB, GIB)
    with pytest.raises(BadInput, match="names no MemTotal or MemAvailable"):
        admission.meminfo("MemTotal: 5 kB\n")


def test_the_roles_verdict_is_the_refusal_as_one_line():
    small = staged("lab-small", {"serve_mode": "add"})["launch"]
    got = admission.verdict(small, hosts(available=0.2), [])
    assert got["refused"].startswith("lab-small does not fit on rank0") and got["claims"] == {}
    assert "; stop a deployment (sparkplay stop NAME)" in got["refused"] and "\n" not in got["refused"]
    assert "refused" not in admission.verdict(small, hosts(), [])


def test_moving_an_added_deployment_to_another_node_needs_a_stop_first():
    on_one = staged("lab-small", {"serve_mode": "add", "serve_node": "rank1"})["launch"]
    found = record_of(on_one, {"rank1": {"bytes": GIB, "how": "x"}})
    with pytest.raises(BadInput, match="lab-small is served on rank1, not where this run places it; stop it first"):
        admission.decide(staged("lab-small", {"serve_mode": "add"})["launch"], hosts(), found)
    assert admission.decide(on_one, hosts(), found)["checked"]  # the same place: a redeploy


def test_what_a_stop_removes_comes_from_the_slots_names_never_a_records_paths():
    hostile = {
        "recipe": "x",
        "slot": "lab-small",
        "unit": "sparkplay-serve@lab-small.service",
        "role": "leader",
        "env_file": "/etc/passwd",
        "path": "/etc/shadow",
    }
    assert names.leftovers([hostile, {"slot": None, "env_file": "/etc/sparkplay/serve.env"}]) == [
        "/etc/sparkplay/serve.d/lab-small.json",
        "/etc/sparkplay/serve.d/lab-small.env",
        "/etc/sparkplay/peer-firewall@lab-small.nft",
        "/etc/systemd/system/sparkplay-serve@lab-small.service",
        "/etc/systemd/system/sparkplay-serve-watchdog@lab-small.service",
        "/etc/systemd/system/sparkplay-peer-firewall@lab-small.service",
        # what a rollback would bring back (issue 54: a stopped deployment came back through a failed `up`)
        "/var/lib/sparkplay/last-good/serve@lab-small.json",
        "/var/lib/sparkplay/last-good/serve@lab-small.previous.json",
        "/var/lib/sparkplay/receipts/sparkplay-serve@lab-small.service.json",
    ]
    with pytest.raises(ValueError, match="is not a recipe name"):
        names.leftovers([{"slot": "../../etc/x"}])


def test_a_llamacpp_worker_claims_its_part_of_the_leaders_kv_cache():
    """rpc-server has no -c: the KV cache of the layers it holds is sized by the leader's context."""
    launch = staged("lab-tiny")["launch"]
    got = admission.decide(launch, hosts(), [])["claims"]
    assert got["rank0"] == got["rank1"] and "512-token KV cache" in got["rank1"]["how"]


def test_the_gateway_copies_another_deployments_key_from_its_env_file_and_nothing_else():
    import base64

    from sparkplay.engines.systemd import env_file
    from sparkplay.served import gateway_key_file

    for runtime in ("docker", "native"):
        text = env_file({"LLAMA_API_KEY": 'k"e$y\\1', "OTHER": "x"}, runtime)
        read = {
            "item": {"slot": "lab-small", "api_key_env": "LLAMA_API_KEY", "runtime": runtime},
            "content": base64.b64encode(text.encode()).decode(),
        }
        made = gateway_key_file(read, "sparkplay-gateway")
        assert made == {
            "path": "/etc/sparkplay/gateway/upstream/lab-small.key",
            "content": 'k"e$y\\1\n',
            "owner": "root",
            "group": "sparkplay-gateway",
            "mode": "0640",
            "secret": True,
        }
    primary = {"item": {"slot": None, "api_key_env": "VLLM_API_KEY"}, "content": base64.b64encode(b"A=1\n").decode()}
    assert gateway_key_file(primary, "g") is None  # no key in the file: nothing written
    primary["content"] = base64.b64encode(b"VLLM_API_KEY=s3\n").decode()
    assert gateway_key_file(primary, "g")["path"] == "/etc/sparkplay/gateway/upstream/@primary.key"


def test_an_added_deployment_spanning_both_nodes_meets_on_ports_of_its_own_behind_its_own_firewall():
    """lab-tiny's model across both ranks as an added deployment beside lab-tiny (the primary): its RPC port
    follows its API port, its records name the ports each rank holds, its firewall is its own."""
    doc = {**recipe("lab-tiny"), "name": "lab-pair", "topology": {**recipe("lab-tiny")["topology"], "nodes": 2}}
    doc["model"] = {**doc["model"], "served_name": "lab-pair"}
    doc["serve"] = {**doc["serve"], "port": 9945}
    settings = {"serve_mode": "add"}
    pair = deployment.with_launch(deployment.compute(doc, RANKS, settings), doc, facts_of(2), settings)["launch"]
    leader, worker = pair["ranks"]
    assert (leader["host"], worker["host"]) == ("rank0", "rank1") and pair["slot"] == "lab-pair"
    assert worker["argv"][-2:] == ["-p", "9946"] and leader["record"]["ports"] == [9945]
    assert worker["record"]["ports"] == [9946] and worker["record"]["slot"] == "lab-pair"
    assert pair["firewall"]["unit"] == "sparkplay-peer-firewall@lab-pair.service"
    assert pair["firewall"]["file"] == "/etc/sparkplay/peer-firewall@lab-pair.nft"
    assert (
        f"table inet {pair['firewall']['table']}" in worker["firewall"] and "tcp dport { 9946 }" in worker["firewall"]
    )
    primary = staged("lab-tiny")["launch"]
    assert primary["ranks"][1]["record"]["ports"] == [50052]  # the primary keeps the engine's own port
    found = record_of(primary, {"rank0": {"bytes": GIB, "how": "x"}, "rank1": {"bytes": GIB, "how": "y"}})
    got = admission.decide(pair, hosts(), found)
    assert got["checked"] and sorted(got["claims"]) == ["rank0", "rank1"]  # each rank's claim on its node
    # a port another deployment's rank holds on the node: refused, naming it and the fix
    clash = [{**r, "ports": [9946]} if r["host"] == "rank1" else r for r in found]
    with pytest.raises(BadInput, match="port 9946 on rank1 is recipe lab-tiny"):
        admission.decide(pair, hosts(), clash)


def test_status_says_a_model_on_demand_that_is_stopped_is_so_by_design():
    record = {
        "recipe": "lab-od-a",
        "host": "rank1",
        "unit": "sparkplay-serve@lab-od-a.service",
        "on_demand": True,
        "served_name": "lab-od-a",
        "api_url": "http://192.168.100.11:9941",
        "claim": {"bytes": 2**30},
    }
    show = {"item": record, "stdout": "ActiveState=inactive\nSubState=dead\nNRestarts=0\n"}
    (row,) = served.added_rows([show], [{"stdout": "{}"}])
    assert (row["health"], row["up"]) == ("on demand", True) and "the gateway starts it" in row["line"]
    (row,) = served.added_rows([{**show, "item": {**record, "on_demand": False}}], [{"stdout": "{}"}])
    assert (row["health"], row["up"]) == ("down", False)  # an always-on one stopped is down


def test_a_recipe_named_primary_added_beside_the_primary_never_gets_the_primarys_engine_key(tmp_path):
    """Key files are named by something a recipe cannot choose (issue 54): a recipe (or a pasted
    `--served-model-name`) called `primary` has a slot of that name, and its key file is its own."""
    from sparkplay.engines.names import SLOT, upstream_key
    from sparkplay.nodetools.serve.gateway_files import UpstreamKeys

    assert SLOT.match("primary") and not SLOT.match("@primary")
    assert upstream_key(None) != upstream_key("primary")
    folder = tmp_path / "upstream"
    folder.mkdir()
    for name, key in (("@primary", "primary-engine-secret"), ("primary", "added-engine-secret")):
        (folder / f"{name}.key").write_text(key + "\n")
        (folder / f"{name}.key").chmod(0o600)
    keys = UpstreamKeys(folder, owner=os.getuid())
    assert keys.of(None) == "primary-engine-secret" and keys.of("primary") == "added-engine-secret"
    assert upstream_key(None).rsplit("/", 1)[-1] == "@primary.key"  # the rule the gateway reads by


@pytest.mark.parametrize(
    "settings",
    [
        {"serve_mode": "add", "serve_port": 9899},  # the API itself
        {"serve_mode": "add", "serve_port": 8899, "serve_standin": True},  # a stand-in: 1000 above its own
    ],
)
def test_the_watchdogs_metrics_port_is_refused_to_any_deployment(settings):
    """A stand-in's port could land on the watchdog's metrics port (9899), which the plan never saw."""
    small = staged("lab-small", settings)["launch"]
    assert small["api"]["port"] == 9899
    with pytest.raises(BadInput, match="port 9899 on rank0 is the watchdog's metrics port"):
        admission.decide(small, hosts(), [], gateway=["rank0", 9930, 9899])
    admission.decide(small, hosts(), [], gateway=["rank0", 9930, 0])  # no watchdog metrics: nothing to clash
