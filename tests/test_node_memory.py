"""Each node's memory as admission counts it, in the gateway's routes (sparkplay.node_memory via
served.routes) and as the gateway reads an engine's use against its limit (memory.unit_use)."""

from __future__ import annotations

from pathlib import Path

from sparkplay import admission, node_memory, served
from sparkplay.nodetools.serve import memory

GIB = 2**30
MEMINFO = {
    "rank0": "MemTotal: 25165824 kB\nMemAvailable: 20000000 kB\n",
    "rank1": "MemTotal: 12582912 kB\nMemAvailable: 9000000 kB\n",
}
DEMAND = {"ttl_s": 600, "wait_s": 120, "budget_gib": 0, "meminfo": MEMINFO}


def record(host: str, slot: str | None, name: str, claim: int, role: str = "leader", **extra) -> dict:
    return {
        "host": host,
        "slot": slot,
        "served_name": name,
        "recipe": name,
        "role": role,
        "api_url": f"http://{host}:9931",
        "claim": {"bytes": claim},
        "unit": "sparkplay-serve.service" if slot is None else f"sparkplay-serve@{slot}.service",
        **extra,
    }


FOUND = [
    record("rank0", None, "tiny", 2 * GIB),
    record("rank1", None, "tiny", 2 * GIB, role="worker"),
    record("rank1", "soak-a", "soak-a", 3 * GIB, on_demand=True),
    record("rank1", "small", "small", 1 * GIB),
]


def test_every_claim_is_counted_once_per_node_less_what_is_dropped_plus_this_runs():
    new = record("rank0", "big", "big", 0) | {"claims": {"rank0": {"bytes": 5 * GIB}, "rank1": {"bytes": 4 * GIB}}}
    rows = node_memory.counted(FOUND, ["small"], new)
    assert sorted((r["host"], r["name"], r["bytes"]) for r in rows) == [
        ("rank0", "big", 5 * GIB),
        ("rank0", "tiny", 2 * GIB),
        ("rank1", "big", 4 * GIB),  # a worker rank's claim of this run, which has no record on disk yet
        ("rank1", "soak-a", 3 * GIB),
        ("rank1", "tiny", 2 * GIB),
    ]
    # an older route record without `claims`: its leader's claim alone
    assert node_memory.counted([], [], record("rank0", "x", "x", GIB)) == [
        {"host": "rank0", "name": "x", "on_demand": False, "bytes": GIB}
    ]


def test_the_budget_for_models_on_demand_leaves_out_their_own_claims_and_nodes_show_every_claim():
    rows = node_memory.counted(FOUND, [])
    total0, total1 = 24 * GIB, 12 * GIB
    assert node_memory.budgets(rows, DEMAND) == {
        "rank0": total0 - admission.RESERVE - 2 * GIB,
        "rank1": total1 - admission.RESERVE - 2 * GIB - 1 * GIB,  # soak-a is on demand: not pinned
    }
    assert node_memory.budgets(rows, DEMAND | {"budget_gib": 2.5})["rank1"] == int(2.5 * GIB)
    nodes = node_memory.nodes(rows, DEMAND)
    assert nodes["rank1"] == {
        "total_bytes": total1,
        "reserve_bytes": admission.RESERVE,
        "claims": {"tiny": 2 * GIB, "soak-a": 3 * GIB, "small": 1 * GIB},
    }
    # a stop (no admission read): the totals stay, the stopped deployment's claim goes
    assert node_memory.recount(nodes, node_memory.counted(FOUND, ["small"]))["rank1"]["claims"] == {
        "tiny": 2 * GIB,
        "soak-a": 3 * GIB,
    }


def test_the_routes_carry_the_nodes_and_each_models_unit_and_a_stop_keeps_the_totals():
    table = served.routes(FOUND, demand=DEMAND)
    assert table["nodes"]["rank0"]["claims"] == {"tiny": 2 * GIB}
    assert table["models"]["small"]["unit"] == "sparkplay-serve@small.service"
    assert table["models"]["tiny"]["unit"] == "sparkplay-serve.service"
    stopped = served.routes(FOUND, ["small"], previous=table)
    assert stopped["nodes"]["rank1"]["total_bytes"] == 12 * GIB
    assert "small" not in stopped["nodes"]["rank1"]["claims"]
    assert "nodes" not in served.routes(FOUND, ["small"], previous={})  # nothing to carry


def test_an_engines_use_and_limit_are_read_from_its_cgroup_by_any_user(tmp_path: Path, monkeypatch):
    v2 = tmp_path / "system.slice" / "sparkplay-serve.service"
    v2.mkdir(parents=True)
    (v2 / "memory.current").write_text("123456\n")
    (v2 / "memory.max").write_text("807318816\n")
    monkeypatch.setattr(memory, "CGROUP2", tmp_path)
    monkeypatch.setitem(memory._GROUPS, "sparkplay-serve.service", "/system.slice/sparkplay-serve.service")
    assert memory.unit_use("sparkplay-serve.service") == {"use_bytes": 123456, "limit_bytes": 807318816}
    (v2 / "memory.max").write_text("max\n")
    assert memory.unit_use("sparkplay-serve.service") == {"use_bytes": 123456, "limit_bytes": None}
    # v1 (the lab): memguard's group beneath the node's
    group = tmp_path / "v1" / "sparkplay" / "sparkplay-serve@a.service"
    group.mkdir(parents=True)
    (group / "memory.usage_in_bytes").write_text("2048\n")
    (group / "memory.limit_in_bytes").write_text(str(9223372036854771712))  # no limit
    monkeypatch.setitem(memory._GROUPS, "sparkplay-serve@a.service", "")
    monkeypatch.setattr(memory, "v1_group", lambda unit: tmp_path / "v1" / "sparkplay" / unit)
    assert memory.unit_use("sparkplay-serve@a.service") == {"use_bytes": 2048, "limit_bytes": None}
    (group / "memory.limit_in_bytes").write_text("4096\n")
    assert memory.unit_use("sparkplay-serve@a.service") == {"use_bytes": 2048, "limit_bytes": 4096}
    monkeypatch.setitem(memory._GROUPS, "docker-engine.service", "")
    assert memory.unit_use("docker-engine.service") is None  # no group it can read: the container's own
