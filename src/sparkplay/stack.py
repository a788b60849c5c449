"""A known-good stack: the bill of materials `sparkplay lock` records per node, and what drifted from it.

The lock lives in the inventory beside the model lock (group_vars/all/sparkplay_stack_lock.yml, variable
`sparkplay_stack_lock`), so every play reads it as a variable. Each node's part is what the node itself
said (module sparkplay_stack_facts): OS and kernel, NVIDIA driver and CUDA, the stack's Debian packages
(NCCL, the container toolkit, Docker, RDMA), the NCCL and RDMA libraries by their bytes (two builds of one
version differ only there), each cable twin's driver and firmware, the Docker engine;
and the served recipe's engine: its images by digest, its packages by version, its program (or
virtualenv) by content, its checkpoints by revision and manifest digest. What a node lacks is null
("none" in words): a lab node has no GPU rows, and the lock says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sparkplay import __version__

SCHEMA = "sparkplay.stack-lock/v1"
VARIABLE = "sparkplay_stack_lock"
# beside the model lock (roles/checkpoint: group_vars/all/sparkplay_lock.yml), in the inventory's folder
FILE = "group_vars/all/sparkplay_stack_lock.yml"
# on each node: the packages sparkplay put on hold (`reset` releases those, never a person's own hold)
HOLDS = "/etc/sparkplay/holds.json"
# the rows every node has, in the order they are shown
BASE = ("os", "kernel", "driver", "cuda", "docker")
WORDS = {"driver": "NVIDIA driver", "cuda": "CUDA", "docker": "Docker engine"}
# the rows that belong to the served recipe's engine (compared only while the lock's recipe is served)
ENGINE = ("images", "engine_packages", "files", "checkpoints")


def what_to_read(
    plan: Mapping[str, Any] | None,
    host: str,
    doc: Mapping[str, Any] | None = None,
    checkpoints: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The module's arguments for one node: what the served deployment's plan runs there (its image, its
    packages, its program, its checkpoints) and whatever the lock `doc` names for it; the stack's own rows
    are always read. `packages` are the engine's (the stack's own are found by the module)."""
    rank = next((r for r in (plan or {}).get("ranks", []) if r.get("host") == host), None)
    found: dict[str, list[str]] = {"twins": [], "images": [], "packages": [], "files": [], "checkpoints": []}
    if plan and rank is not None:
        creates = (plan.get("install") or {}).get("creates")
        found["images"] = [plan["image"]] if plan.get("image") else []
        found["packages"] = list(plan.get("packages") or [])
        found["files"] = [rank["exec"][0]] if plan.get("runtime") == "native" and rank.get("exec") else []
        found["files"] += [creates] if creates else []
        found["checkpoints"] = [str(c["dest"]) for c in checkpoints if c.get("dest")]
    rows = ((doc or {}).get("nodes") or {}).get(host) or {}
    for arg, key in (
        ("twins", "fabric"),
        ("images", "images"),
        ("packages", "engine_packages"),
        ("files", "files"),
        ("checkpoints", "checkpoints"),
    ):
        found[arg] += [name for name in rows.get(key) or {} if name not in found[arg]]
    return {key: list(dict.fromkeys(values)) for key, values in found.items()}


def node(read: Mapping[str, Any], engine_packages: Iterable[str]) -> dict[str, Any]:
    """One node's part of the lock from what the module read: the stack's packages apart from the engine's."""
    mine = set(engine_packages)
    packages = read.get("packages") or {}
    version = {name: (p or {}).get("version") for name, p in packages.items()}
    return {
        **{key: read.get(key) for key in BASE},
        "packages": {n: v for n, v in sorted(version.items()) if n not in mine},
        "libraries": dict(sorted((read.get("libraries") or {}).items())),
        "fabric": dict(sorted((read.get("fabric") or {}).items())),
        "images": dict(sorted((read.get("images") or {}).items())),
        "engine_packages": {n: version.get(n) for n in sorted(mine)},
        "files": dict(sorted((read.get("files") or {}).items())),
        "checkpoints": dict(sorted((read.get("checkpoints") or {}).items())),
    }


def lock(
    nodes: Mapping[str, Mapping[str, Any]],
    recipe: Mapping[str, Any] | None,
    stamp: str,
    before: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The lock document: every node's rows, the recipe they serve (name and content hash), sparkplay's version.
    The same stack as `before` keeps that lock as it is (its time too): locking twice changes nothing."""
    doc = {
        "schema": SCHEMA,
        "locked_at": stamp,
        "sparkplay": __version__,
        "recipe": {"name": recipe.get("name"), "sha256": recipe_sha256(recipe)} if recipe else None,
        "nodes": {host: dict(rows) for host, rows in sorted(nodes.items())},
    }
    if before and before.get("hash") == lock_hash(doc):
        return dict(before)
    return {**doc, "hash": lock_hash(doc)}


def recipe_sha256(recipe: Mapping[str, Any]) -> str:
    """A recipe's content hash, by its canonical JSON (the file's comments and key order do not count)."""
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def lock_hash(doc: Mapping[str, Any] | None) -> str | None:
    """What names the locked stack (a bench result carries it): its nodes, recipe and version, not its time."""
    if not doc:
        return None
    kept = {k: doc.get(k) for k in ("schema", "sparkplay", "recipe", "nodes")}
    return "sha256:" + hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def _short(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, Mapping):  # a checkpoint's marker
        return f"revision {value.get('revision') or 'none'}, manifest {_short(value.get('manifest'))}"
    return re.sub(r"(sha256:[0-9a-f]{12})[0-9a-f]+", r"\1", str(value))


def _flat(rows: Mapping[str, Any], engine: bool, kinds: Iterable[str] | None = None) -> dict[str, Any]:
    """The rows as {words: value}; only the `kinds` of rows named (a lock made before a kind existed has none
    of it, which is not drift)."""
    flat: dict[str, Any] = {WORDS.get(k, k): rows.get(k) for k in BASE}
    named = {
        "packages": "package",
        "libraries": "library",
        "fabric": "fabric",
        "images": "image",
        "engine_packages": "package",
        "files": "file",
        "checkpoints": "checkpoint",
    }
    for key, word in named.items():
        if (key in ENGINE and not engine) or (kinds is not None and key not in kinds):
            continue
        flat.update({f"{word} {name}": value for name, value in (rows.get(key) or {}).items()})
    return flat


def drift(
    locked: Mapping[str, Any], now: Mapping[str, Any], *, engine: bool = True, against: str = "locked"
) -> list[str]:
    """What differs on one node, in words: "kernel 6.17.0-1008 (locked 6.14.0-1015)"; the engine's rows too
    unless `engine` is false (another recipe than the lock's is being served)."""
    was, isnow = _flat(locked, engine), _flat(now, engine, kinds=locked.keys())
    said = []
    for item in [*was, *(k for k in isnow if k not in was)]:
        before, after = was.get(item), isnow.get(item)
        if before == after or (item not in was and after is None):
            continue
        if item not in was:
            said.append(f"{item} {_short(after)} ({'not in the lock' if against == 'locked' else f'none {against}'})")
        elif after is None:
            said.append(f"{item} is gone ({against} {_short(before)})")
        else:
            said.append(f"{item} {_short(after)} ({against} {_short(before)})")
    return said


def cluster_drift(
    doc: Mapping[str, Any] | None,
    now: Mapping[str, Mapping[str, Any]],
    ranks: Mapping[str, Any],
    recipe: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every node's drift from the lock: {locked, hash, recipe_changed, nodes: {host: [words]}, lines}.

    With `recipe` (what `up` is about to serve), a recipe other than the lock's (another name, or the same
    name with other content) is a change the user asked for: only the stack's own rows are compared.
    """
    if not doc:
        return {"locked": False, "hash": None, "recipe_changed": False, "nodes": {}, "lines": []}
    locked_recipe = doc.get("recipe") or {}
    changed = bool(recipe) and (locked_recipe.get("name"), locked_recipe.get("sha256")) != (
        recipe.get("name"),
        recipe_sha256(recipe),
    )
    found: dict[str, list[str]] = {}
    for host, rows in (doc.get("nodes") or {}).items():
        if host not in now:
            found[host] = ["not read (unreachable, or not in this run)"] if host in ranks else ["not in the inventory"]
            continue
        found[host] = drift(rows, now[host], engine=not changed)
    for host in now:
        if host not in (doc.get("nodes") or {}):
            found[host] = ["not in the lock (a node added since): `sparkplay lock` records it"]
    lines = [
        f"rank {ranks.get(h, '?')} ({h}): {w}"
        for h, words in sorted(found.items(), key=lambda i: str(ranks.get(i[0], i[0])))
        for w in words
    ]
    return {"locked": True, "hash": doc.get("hash"), "recipe_changed": changed, "nodes": found, "lines": lines}


def holds(
    read: Mapping[str, Any], holdable: Iterable[str], engine_packages: Iterable[str], ours_before: Iterable[str] = ()
) -> dict[str, list[str]]:
    """The installed packages a lock holds against upgrades (the running kernel's, the driver's, the engine's).

    {hold: all of them; ours: those sparkplay held (not held by a person before), which `reset` and a later
    lock release; release: ours no longer locked}. A person's own hold is never released.
    """
    packages = read.get("packages") or {}
    wanted = {n for n in {*holdable, *engine_packages} if packages.get(n)}
    before = set(ours_before)
    ours = (before & wanted) | {n for n in wanted if not packages[n].get("held")}
    return {"hold": sorted(wanted), "ours": sorted(ours), "release": sorted(before - wanted)}


def compare_locks(now: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> list[str]:
    """What differed between the stacks two results ran on (their locks), in words, for `bench --compare`."""
    if not now or not before:
        return [f"stack: {'this result' if not now else 'the earlier result'} names no lock (`sparkplay lock`)"]
    if now.get("hash") == before.get("hash"):
        return [f"stack: the same ({now.get('hash')})"]
    said = [f"stack: {now.get('hash')} (before {before.get('hash')})"]
    was, isnow = before.get("recipe") or {}, now.get("recipe") or {}
    if was != isnow:
        said.append(
            f"recipe {isnow.get('name')} sha256:{str(isnow.get('sha256'))[:12]} (before {was.get('name')} "
            f"sha256:{str(was.get('sha256'))[:12]})"
        )
    if now.get("sparkplay") != before.get("sparkplay"):
        said.append(f"sparkplay {now.get('sparkplay')} (before {before.get('sparkplay')})")
    old_nodes, new_nodes = before.get("nodes") or {}, now.get("nodes") or {}
    for host in sorted({*old_nodes, *new_nodes}):
        if host not in old_nodes or host not in new_nodes:
            said.append(f"{host}: {'only now' if host in new_nodes else 'only before'}")
            continue
        said += [f"{host}: {words}" for words in drift(old_nodes[host], new_nodes[host], against="before")]
    return said


def pins(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a bench result is pinned to, from the lock it ran under (issue 59's receipts): the lock's hash,
    the recipe's sha256, and per node the driver, CUDA, NCCL (its package's version and its library's bytes),
    the engine's images by digest and the checkpoints' revisions. Empty without a lock."""
    if not doc:
        return {}
    nodes = {}
    for host, rows in sorted((doc.get("nodes") or {}).items()):
        libraries = rows.get("libraries") or {}
        nodes[host] = {
            "driver": rows.get("driver"),
            "cuda": rows.get("cuda"),
            "nccl": (rows.get("packages") or {}).get("libnccl2"),
            "nccl_bytes": {p: d for p, d in sorted(libraries.items()) if p.rsplit("/", 1)[-1].startswith("libnccl.")},
            "images": dict(rows.get("images") or {}),
            "revisions": {f: (c or {}).get("revision") for f, c in sorted((rows.get("checkpoints") or {}).items())},
        }
    return {"lock": doc.get("hash"), "recipe_sha256": (doc.get("recipe") or {}).get("sha256"), "nodes": nodes}
