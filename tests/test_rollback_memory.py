"""A way back is admitted as `up` admits a plan (issue 54): the kept deployment's claim against what the node
serves now. Records and /proc/meminfo as the node's probe reads them; no lab needed."""

from __future__ import annotations

import json

from sparkplay import rollback

GIB = 1024**3
PRIMARY = "/etc/sparkplay/serve.json"


def record(recipe: str, slot: str | None, gib: float, unit: str | None = None) -> dict:
    return {
        "recipe": recipe,
        "role": "leader",
        "unit": unit or (f"sparkplay-serve@{slot}.service" if slot else "sparkplay-serve.service"),
        "served_name": recipe,
        "slot": slot,
        "claim": {"bytes": int(gib * GIB), "how": "stated"},
    }


def kept(recipe: str, slot: str | None, gib: float) -> dict:
    """The last good deployment as the serve role keeps it: its files, the record among them."""
    mine = record(recipe, slot, gib)
    return {
        "recipe": recipe,
        "role": "leader",
        "unit": mine["unit"],
        "files": [
            {"path": "/etc/systemd/system/" + mine["unit"], "content": "[Service]\nExecStart=/bin/true\n"},
            # another deployment's record among the files (a hostile or stale one) is never taken for its own
            {"path": "/etc/sparkplay/other.json", "content": json.dumps(record("big", "big", 500))},
            {"path": PRIMARY if slot is None else f"/etc/sparkplay/serve.d/{slot}.json", "content": json.dumps(mine)},
        ],
    }


def node(total_gib: float, available_gib: float, *serving: dict) -> dict:
    contents = {
        "/proc/meminfo": f"MemTotal: {int(total_gib * 1024**2)} kB\nMemAvailable: {int(available_gib * 1024**2)} kB\n"
    }
    added = {}
    for r in serving:
        if r["slot"] is None:
            contents[PRIMARY] = json.dumps(r)
        else:
            added[f"/etc/sparkplay/serve.d/{r['slot']}.json"] = json.dumps(r)
    return {"contents": contents, "directory_contents": added}


def test_a_kept_deployment_that_fits_beside_what_serves_goes_back():
    probe = node(128, 60, record("coder", None, 40), record("chat", "chat", 20))
    assert rollback.memory_refusal(kept("coder-old", None, 50), probe, PRIMARY, "spark-0") is None


def test_one_added_since_that_took_its_memory_refuses_it_naming_the_node_and_the_fix_unless_forced():
    # the primary (40 GiB now, 90 before the change) failed; a 70 GiB model was added meanwhile
    probe = node(128, 14, record("coder", None, 40), record("chat", "chat", 70))
    said = rollback.memory_refusal(kept("coder-old", None, 90), probe, PRIMARY, "spark-0")
    assert said is not None
    assert said.startswith("coder-old does not fit on spark-0: it claims 90.0 GiB") and "chat 70.0 GiB" in said
    assert "sparkplay stop NAME" in said and "serve_force_admit" in said
    assert rollback.memory_refusal(kept("coder-old", None, 90), probe, PRIMARY, "spark-0", force=True) is None


def test_the_memory_of_the_deployment_it_replaces_is_given_back_first():
    # 10 GiB available, but the failed version of the same slot holds 40 that come back as it is replaced
    probe = node(128, 10, record("chat", "chat", 40), record("coder", None, 30))
    assert rollback.memory_refusal(kept("chat-old", "chat", 45), probe, PRIMARY, "spark-0") is None


def test_no_claim_no_meminfo_or_no_record_among_the_files_is_no_refusal():
    probe = node(128, 1, record("chat", "chat", 120))
    doc = kept("coder-old", None, 0)
    assert rollback.memory_refusal(doc, probe, PRIMARY, "spark-0") is None
    assert rollback.memory_refusal(kept("coder-old", None, 90), {"contents": {}}, PRIMARY, "spark-0") is None
    assert rollback.memory_refusal({"unit": "sparkplay-serve.service", "files": []}, probe, PRIMARY, "h") is None
    assert rollback.memory_refusal(None, probe, PRIMARY, "spark-0") is None
