"""What the roles read of each other and of their commands, written once in Python (issue 42): each host's
variable, a node tool's answer, what a probe read, what `stop` takes down. The roles' Jinja only calls these."""

from __future__ import annotations

import json

import pytest

from sparkplay import bench, checkpoints, doctor, layout, plays, probed, served, stopping
from sparkplay.engines import names

HOSTVARS = {
    "n0": {"facts": {"machine": "aarch64"}, "start": {"changed": True}, "ranks": [1, 2], "none": None},
    "n1": {"facts": None, "start": {"changed": False}, "ranks": [3]},
    "n2": {"start": {"skipped": True}},
}


def test_per_host_leaves_out_hosts_without_the_variable_and_those_the_inventory_lacks():
    assert plays.per_host(["n0", "n1", "n2", "gone"], HOSTVARS, "facts") == {"n0": {"machine": "aarch64"}, "n1": None}
    assert plays.per_host(["n1", "n0"], HOSTVARS, "facts", "machine") == {"n1": None, "n0": "aarch64"}
    assert list(plays.per_host(["n1", "n0"], HOSTVARS, "ranks")) == ["n1", "n0"]  # the order given


def test_of_hosts_drops_none_and_joins_lists():
    assert plays.of_hosts(["n0", "n1"], HOSTVARS, "facts") == [{"machine": "aarch64"}]
    assert plays.of_hosts(["n0", "n1", "n2"], HOSTVARS, "ranks", joined=True) == [1, 2, 3]
    looped = {"a": {"r": {"results": [1]}}, "b": {"r": {"results": [2, 3]}}, "c": {"r": {}}}
    assert plays.of_hosts(["a", "b", "c"], looped, "r", "results") == [1, 2, 3]
    assert plays.of_hosts(["n0"], HOSTVARS, "none") == []


def test_any_host_reads_a_field_or_the_value():
    assert plays.any_host(["n0", "n1", "n2"], HOSTVARS, "start") is True
    assert plays.any_host(["n1", "n2"], HOSTVARS, "start") is False  # not changed, skipped
    assert plays.any_host(["n0"], {"n0": {"o": {"ready": True}}}, "o", "ready") is True
    assert plays.any_host(["a", "b"], {"a": {"x": False}, "b": {"x": True}}, "x", None) is True
    assert plays.any_host(["a"], {"a": {"x": False}}, "x", None) is False


@pytest.mark.parametrize(
    ("result", "want"),
    [
        ({"stdout": '{"ready": true}'}, {"ready": True}),
        ({"stdout": ' \n{"a": 1}\n'}, {"a": 1}),
        ({"stdout": "[1, 2]", "stderr": "odd"}, {"why": "odd"}),  # JSON but no object
        ({"stdout": "{not json", "stderr": "Traceback ..."}, {"why": "Traceback ..."}),
        ({"stdout": "", "stderr": "", "msg": "[Errno 2] No such file"}, {"why": "[Errno 2] No such file"}),
        ({"skipped": True}, {"why": "skipped"}),
        ({}, {"why": "no answer"}),
        (None, {"why": "no answer"}),
        ("garbage", {"why": "no answer"}),
    ],
)
def test_a_tools_answer_is_its_json_object_or_why_in_words(result, want):
    assert plays.answer(result) == want


def test_an_answer_can_fall_back_to_a_given_value():
    assert plays.answer({"stdout": "oops"}, {}) == {}
    assert plays.answer({"stdout": '{"why": "x"}'}, {}) == {"why": "x"}


def test_readiness_is_not_ready_without_an_answer_and_splits_journals():
    assert plays.readiness({"stderr": " timed out \n"}) == {
        "ready": False,
        "journals": {},
        "why": "timed out",
        "journal_lines": {},
    }
    said = {"ready": False, "why": "rank 1 died", "journals": {"rank1": "a\nb"}}
    got = plays.readiness({"stdout": json.dumps(said)}, recipe="r", seconds=1.5)
    assert got["journal_lines"] == {"rank1": ["a", "b"]} and got["recipe"] == "r" and got["seconds"] == 1.5
    assert plays.readiness({"stdout": '{"ready": true, "seconds": 3}'}, seconds=9)["seconds"] == 9  # extra wins


def test_properties_reads_systemctl_show():
    lines = ["ActiveState=active", "ExecStart={ path=/x ; argv[]=/x --a=b }", "junk", ""]
    assert plays.properties(lines) == {"ActiveState": "active", "ExecStart": "{ path=/x ; argv[]=/x --a=b }"}
    assert plays.properties(None) == {}


def test_what_a_probe_read_is_shaped_for_the_rules():
    probe = {
        "contents": {"/proc/meminfo": "MemTotal: 1 kB", "/r.json": '{"unit": "u"}'},
        "directory_contents": {"/added/a.json": "{}"},
        "bytes": {"/m/a": 10, "/m/b": None},
        "gguf_headers": {"/m/a": None, "/m/b": {"block_count": 2}},
    }
    assert probed.record_texts(probe, "/r.json") == {"/added/a.json": "{}", "/r.json": '{"unit": "u"}'}
    assert probed.record_texts({}, "/r.json") == {"/r.json": None}
    assert probed.node_memory(probe) == {"meminfo": "MemTotal: 1 kB", "weights": 10, "gguf": {"block_count": 2}}
    launch = {"requires": [{"path": "/m", "what": "the model"}, {"path": "/o", "what": "the overlay"}, {"path": "/m"}]}
    assert probed.required_paths(launch) == ["/m", "/o"]
    assert probed.paths_lacking(launch["requires"][:2], ["/o"]) == [{"path": "/o", "what": "the overlay"}]
    assert probed.lacking_words(launch["requires"][:2], ["/o", "/m"]) == "the model (/m), the overlay (/o)"
    assert probed.lacking_words(launch["requires"], []) == ""
    states = {"a": {"active": "active", "enabled": "enabled"}, "b": {"active": "active", "enabled": "disabled"}}
    assert probed.units_up(states) == ["a"]


RECORDS = [
    {"unit": "w", "role": "worker", "slot": None, "tool": None},
    {"unit": "l", "role": "leader", "slot": None, "watchdog_unit": "dog", "watch_unit": "watch", "tool": "/t"},
    {"unit": "l@c", "role": "leader", "slot": "c", "firewall_unit": "fw@c", "api_key_env": "K"},
]


def test_stop_takes_watchdogs_down_first_then_watchers_leaders_workers():
    plan = stopping.stop_plan(RECORDS)
    assert plan["watchdogs"] == ["dog"] and plan["watches"] == ["watch"]
    assert plan["leaders"] == ["l", "l@c"] and plan["workers"] == ["w"] and plan["units"] == ["w", "l", "l@c"]
    assert plan["memguards"][0] == {"tool": names.TOOLS["serve"], "unit": "w"}  # an older record: the node's tool
    assert plan["memguards"][1]["tool"] == "/t"
    assert plan["firewalls"] == ["fw@c"] and plan["slots"] == [None, "c"] and plan["added_slots"] == ["c"]
    assert stopping.stop_plan([])["slots"] == []
    routes = {"models": {"m": {"slot": "c", "units": ["w@c", "l@c"]}, "p": {"slot": None, "units": ["l"]}}}
    assert stopping.routed_units(routes, "c") == ["l@c", "w@c"] and stopping.routed_units(routes, "x") == []


def test_the_gateway_presents_the_other_deployments_keys():
    assert served.any_added(RECORDS) and not served.any_added(RECORDS[:2])
    assert [r["unit"] for r in served.key_holders(RECORDS, None)] == ["l@c"]
    assert served.key_holders(RECORDS, "c") == []


def test_a_plans_rank_and_the_way_back():
    launch = {"ranks": [{"host": "a", "role": "leader"}, {"host": "b", "role": "worker"}]}
    assert layout.plan_rank(launch) == {"host": "a", "role": "leader"}
    assert layout.plan_rank(launch, "b")["role"] == "worker" and layout.plan_rank(launch, "c") is None
    leader, worker = {"role": "leader"}, {"role": "worker"}
    assert layout.go_back([leader, worker], [False, True]) and not layout.go_back([leader, worker], [False, False])
    assert not layout.go_back([worker], [True]) and not layout.go_back([leader, leader], [True])
    text = layout.last_good_text({"last_good": {"recipe": "r", "files": None, "unit": "u"}}, [{"tool": 1}, {"f": 2}])
    assert json.loads(text) == {"recipe": "r", "files": [{"f": 2}], "unit": "u"}


def test_added_users_are_the_prefix_and_a_slot_hash_only():
    prefix = names.ADDED_USER_PREFIX
    passwd = {
        f"{prefix}0123456789ab": [],
        f"{prefix}0123456789abc": [],  # too long
        f"{prefix}0123456789AB": [],  # not the hash's alphabet
        f"x{prefix}0123456789ab": [],
        "root": [],
    }
    assert names.added_users(passwd) == [f"{prefix}0123456789ab"] and names.added_users(None) == []


def test_the_cable_addresses_of_a_fabric_environment():
    text = "# c\nSPARKPLAY_FABRIC_ADDRESSES=10.0.0.1,,10.0.1.1\nNCCL_X=1\n"
    assert checkpoints.fabric_addresses(text) == ["10.0.0.1", "10.0.1.1"]
    assert checkpoints.fabric_addresses(None) == [] and checkpoints.fabric_addresses("X=1") == []


def test_the_bench_measures_the_recipes_leader_or_the_named_model():
    records = [
        {"role": "leader", "recipe": "a", "served_name": "ma"},
        {"role": "worker", "recipe": "a", "served_name": "ma"},
        {"role": "leader", "recipe": "b", "served_name": "mb"},
    ]
    assert bench.leaders_serving(records, "", "a") == [records[0]]
    assert bench.leaders_serving(records, "mb", "a") == [records[2]]
    assert bench.leaders_serving(records, "zz", "a") == []


def test_the_doctor_bundle_names_each_command():
    results = [{"item": {"name": "nvidia-smi"}, "rc": 0, "stdout": "ok"}, {"item": {"name": "ib"}, "skipped": True}]
    assert doctor.commands(results) == {"nvidia-smi": {"rc": 0, "stdout": "ok", "stderr": ""}, "ib": None}
    assert doctor.collect([], [], [], "A=1", {"rank": 0})["rank"] == 0
