"""The deployment: who leads, every path on a node, every checkpoint, the overlay and what each rank runs.

Computed on the controller in two stages, both pure functions:
- `compute`, before any node is touched, from the recipe (or none), the
  inventory's ranks and its settings: the leader, the nodes, every node
  path, unit names, the API address, checkpoints, overlay, engine.
  playbooks/recipe.yml hands it to Ansible (lookup `sparkplay_deployment`).
- `with_launch`, once every rank's facts are known (its cable, from the
  fabric.env provisioning wrote): the launch plan of the engine adapters
  (engines/plan.py) plus what the serve role writes from it: each rank's
  unit command line, its units and the record it keeps. The serve role's
  preflight computes it on the leader and every role reads it.
`sparkplay plan --json` prints both stages, asking the nodes for their facts.

Paths are normalised here once (trailing slashes, '..' refused), so a
checkpoint folder, the overlay folder and the files the units read are the
same strings wherever they are used.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkplay import __version__, addresses, admission, checkpoints, topology
from sparkplay.boundary import check_allow, check_trusted
from sparkplay.engines import names as slots
from sparkplay.engines import registry
from sparkplay.engines.context import Node, Options, api_address
from sparkplay.engines.names import TOOLS, UNIT_DIR, UNITS, for_slot
from sparkplay.engines.plan import build
from sparkplay.engines.systemd import plan_digest
from sparkplay.errors import BadInput
from sparkplay.settings import DEFAULTS, LAUNCH_DEFAULTS, MODES, first_byte_bound, switch

GROUP = "sparkplay_nodes"

OVERLAY_EXPECT = 864  # MTP expert matrices of GLM-5.x (layer 45: 288 experts x gate/up/down)


def leader_of(ranks: Mapping[str, Any]) -> str:
    """The host with rank 0, once the layout is valid (the one rule for who leads)."""
    problems = topology.rank_layout_problems(ranks)
    if problems:
        fix = "give each node a distinct sparkplay_rank from 0"
        raise BadInput(f"inventory rank layout: {'; '.join(problems)}", fix)
    return next(host for host, rank in ranks.items() if topology.leads(rank))


def hosts_layout_problems(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """`groups['sparkplay_nodes'] | sparkplay_rank_layout_problems(hostvars)`: the rank layout's problems."""
    return topology.rank_layout_problems({host: hostvars[host].get("sparkplay_rank") for host in hosts})


def leader_host(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> str | None:
    """`groups['sparkplay_nodes'] | sparkplay_leader_host(hostvars)`: rank 0's host, whose view of the
    inventory's settings a run takes; with a broken layout the first host, for the deployment's own check
    to name what is wrong."""
    hosts = list(hosts)
    try:
        return leader_of({host: hostvars[host].get("sparkplay_rank") for host in hosts})
    except BadInput:
        return hosts[0] if hosts else None


def _api(recipe: Mapping[str, Any], settings: Mapping[str, Any], offset: int = 0) -> dict[str, Any] | None:
    if not recipe.get("serve"):
        return None
    bind, port = api_address(recipe["serve"], settings.get("serve_bind"), settings.get("serve_port"))
    if port + offset > 65535:  # a stand-in's: its deployment's port + STANDIN_PORT_OFFSET
        raise BadInput(
            f"port {port} leaves no port for {recipe['name']}'s stand-in ({port + offset})",
            "choose a port below 64536 (sparkplay up --port N), or serve_update_beside: false",
        )
    return {"bind": bind, "port": port + offset}


def compute(
    recipe: Mapping[str, Any] | None,
    ranks: Mapping[str, Any],
    settings: Mapping[str, Any] | None = None,
    staged: Sequence[Mapping[str, Any]] = (),
    lock: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The deployment as plain data (JSON-safe): raises BadInput naming what to fix."""
    merged = {**DEFAULTS, **{k: v for k, v in (settings or {}).items() if v is not None}}
    leader = leader_of(ranks)
    mode = str(merged.get("serve_mode") or "replace")
    if mode not in MODES:
        raise BadInput(f"serve_mode {mode!r} is not a mode", "use replace (the default) or add")
    slot = (recipe or {}).get("name") if mode == "add" and recipe else None
    # the first pass of an added deployment's update: its new version beside the old, as its stand-in
    slot = slots.standin(slot) if slot is not None and merged.get("serve_standin") else slot
    nodes = _placement(recipe, ranks, mode, str(merged.get("serve_node") or ""))
    names = for_slot(slot, checkpoints.absolute(merged["sparkplay_serve_record"], "sparkplay_serve_record"))
    root = checkpoints.absolute(merged["sparkplay_model_root"], "sparkplay_model_root")
    recipe = recipe or {}
    model = recipe.get("model") or {}
    overlay = None
    if model.get("overlay"):
        if not model.get("repo"):
            raise BadInput(f"recipe {recipe.get('name')} asks for an overlay but names no model.repo", "set model.repo")
        overlay = {
            "source": checkpoints.checkpoint_dir(root, model["repo"]),
            "output": checkpoints.overlay_dir(root, model["overlay"]["mount"]),
            "mount": model["overlay"]["mount"],
            "expect": int(model["overlay"].get("expect") or OVERLAY_EXPECT),
        }
    engine = recipe.get("engine") or {}
    return {
        "recipe": recipe.get("name"),
        "sparkplay_version": __version__,  # recorded on every node with what it runs
        "group": GROUP,
        # the cluster's leader (rank 0 of the inventory: downloads, plans, the gateway), and the
        # deployment's own nodes, ranked from 0 (every node for the primary; one for an added deployment)
        "leader": leader,
        "nodes": nodes,
        "mode": mode,
        "slot": slot,
        "stands_in_for": slots.stands_in_for(slot),  # a stand-in's deployment (its update's first pass)
        "paths": {
            "model_root": root,
            "fabric_env": checkpoints.absolute(merged["sparkplay_fabric_env_file"], "sparkplay_fabric_env_file"),
            "serve_record": names["record"],
            "serve_env": names["env_file"],
            "unit_dir": UNIT_DIR,
            "serve_unit": f"{UNIT_DIR}/{names['units']['serve']}",
            "watchdog_state": names["watchdog_state"],
            "last_good": names["last_good"],  # under serve_state_dir
            "tools": dict(TOOLS),
        },
        "units": names["units"],
        "checkpoints": checkpoints.sources(recipe, root, [*staged, *_staged_model(recipe, root, staged)], lock),
        "model": {"dir": checkpoints.model_dir(root, model, _serves_folder(recipe)), "repo": model.get("repo")}
        if model
        else None,
        "overlay": overlay,
        "engine": {
            "name": engine.get("name"),
            "runtime": engine.get("runtime"),
            "image": engine.get("image") if engine.get("runtime") == "docker" else None,
            "docker": checkpoints.absolute(merged["sparkplay_docker"], "sparkplay_docker"),
        }
        if engine
        else None,
        "api": _api(recipe, merged, slots.STANDIN_PORT_OFFSET if slots.stands_in_for(slot) else 0),
    }


def _placement(
    recipe: Mapping[str, Any] | None, ranks: Mapping[str, Any], mode: str, node: str
) -> list[dict[str, Any]]:
    """The deployment's nodes: the primary runs on every node of the inventory (a recipe for N nodes on exactly
    N); an added deployment on one, `serve_node` or the leader, so its ports and memory sit beside the others',
    or, written for N nodes, on the first N (the leader leads it)."""
    ordered = sorted(ranks.items(), key=lambda item: item[1])
    if mode == "replace":
        if node:
            raise BadInput(
                f"serve_node {node} places an added deployment only", "use --add (serve_mode=add), or drop it"
            )
        topology.check_node_count(recipe, len(ranks), GROUP)
        return [
            {"host": host, "rank": int(rank), "role": "leader" if topology.leads(rank) else "worker"}
            for host, rank in ordered
        ]
    if not recipe:
        raise BadInput("serve_mode add needs a recipe", "pass -e recipe=NAME (sparkplay up NAME --add)")
    topology.check_node_count(recipe, len(ranks), GROUP, mode)
    wanted = (recipe.get("topology") or {}).get("nodes") or 1
    if wanted > 1:
        if node:
            raise BadInput(
                f"serve_node {node} places a one-node deployment; {recipe['name']} runs on {wanted}",
                "leave --node out: it runs on the first ranks, the leader leading",
            )
        return [
            {"host": host, "rank": int(rank), "role": "leader" if topology.leads(rank) else "worker"}
            for host, rank in ordered[:wanted]
        ]
    host = node or ordered[0][0]
    if host not in ranks:
        raise BadInput(f"serve_node {host} is not in {GROUP}", f"name one of {', '.join(h for h, _ in ordered)}")
    return [{"host": host, "rank": 0, "role": "leader"}]


def _serves_folder(recipe: Mapping[str, Any]) -> bool:
    """The engine serves model.path as a model folder (vLLM), not a file (llama.cpp's GGUF)."""
    name = (recipe.get("engine") or {}).get("name")
    return bool(name) and registry.spec(str(name)).folder_model


def _staged_model(recipe: Mapping[str, Any], root: str, staged: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A model folder the recipe serves from the model root with no checkpoint to download: rank 0 holds
    it, and the checkpoint role mirrors it to the other ranks as it would an inventory's staged folder."""
    model = recipe.get("model") or {}
    path = str(model.get("path") or "")
    if not _serves_folder(recipe) or not path or path.startswith("/") or model.get("checkpoints"):
        return []
    folder = checkpoints.model_dir(root, model, path_is_folder=True)
    if folder is None or any(str(s.get("staged", "")).rstrip("/") == folder for s in staged):
        return []
    return [{"name": posixpath.basename(folder), "staged": folder}]


def with_launch(
    doc: Mapping[str, Any],
    recipe: Mapping[str, Any],
    facts: Mapping[str, Mapping[str, Any]],
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Stage two: `doc` (stage one) with `launch`, what every rank runs, from each host's facts
    ({machine, fabric_env}) and the serve settings (LAUNCH_DEFAULTS and the API address's)."""
    merged = {**LAUNCH_DEFAULTS, **{k: v for k, v in (settings or {}).items() if v is not None}}
    if doc.get("slot") is not None:  # serve_watchdog_state is the primary's; an added one's is its slot's own
        merged["serve_watchdog_state"] = None
    missing = [n["host"] for n in doc["nodes"] if not (facts.get(n["host"]) or {}).get("fabric_env")]
    if missing:
        raise BadInput(f"{', '.join(missing)} has no fabric environment yet", "run provision.yml first (site.yml does)")
    nodes = [Node.from_facts(n["host"], {**facts[n["host"]], "rank": n["rank"]}) for n in doc["nodes"]]
    state = checkpoints.absolute(str(merged["serve_state_dir"]), "serve_state_dir")
    first_byte = first_byte_bound(merged["serve_first_byte_timeout"])
    plan = _launch(doc, recipe, nodes, merged, doc.get("slot"), doc["api"]["port"])
    digest = plan_digest(plan)  # of the launch plan alone: what every rank of one run shares
    # a stand-in (names.STANDIN) carries the digest its deployment would have from the same inputs: the same
    # as the running one's plan_sha256 when nothing changed, so the update needs no stand-in
    base = slots.stands_in_for(doc.get("slot"))
    port = doc["api"]["port"] - slots.STANDIN_PORT_OFFSET
    version = plan_digest(_launch(doc, recipe, nodes, merged, base, port)) if base else digest
    tool = checkpoints.absolute(str(merged["serve_tool"]), "serve_tool")
    # 0: a rank waits for its peers and its cable address as long as it takes (no start is counted meanwhile)
    wait = int(merged["serve_worker_wait"] or 0)
    watchdog_state = merged["serve_watchdog_state"] or f"{state}/{doc['paths'].get('watchdog_state', 'watchdog.json')}"
    units = doc.get("units") or UNITS
    watchdog_wanted = switch(merged["serve_watchdog_enabled"], "serve_watchdog_enabled")
    for rank in plan["ranks"]:
        leader = rank["role"] == "leader"
        watch = plan["leader_follows_workers"] and leader
        watchdog = watchdog_wanted and leader
        # workers first: a rank with peers to wait for runs the serve tool, which waits, then becomes the engine
        # and a rank bound to its cable address waits until the node holds it (after a boot, a pulled cable)
        binds = sorted({str(w["address"]) for w in rank.get("listen") or [] if _cable_bound(str(w["address"]))})
        waits = [*(f"--wait-for={w}" for w in rank["wait_for"]), *(f"--bind={b}" for b in binds)]
        rank["start"] = (
            [tool, "run", "--timeout", str(wait), *waits, "--", *rank["exec"]] if waits else list(rank["exec"])
        )
        # a group engine's leader restarts its workers before each start of its own (none outlives its leader)
        workers = [r["address"] for r in plan["ranks"] if r["role"] != "leader"]
        rank["start_pre"] = (
            [tool, "restart-workers", "--unit", plan["unit"], *(f"--peer={w}" for w in workers)]
            if leader and plan["workers_follow_leader"] and workers
            else []
        )
        parts = (
            "serve",
            *(["watch"] if watch else []),
            *(["watchdog"] if watchdog else []),
            *(["firewall"] if rank.get("firewall") else []),
        )
        rank["units"] = [units[part] for part in parts]
        rank["record"] = {
            "recipe": plan["recipe"],
            "engine": plan["engine"],
            "runtime": plan["runtime"],
            "rank": rank["rank"],
            "role": rank["role"],
            "unit": plan["unit"],
            "address": rank["address"],
            "served_name": plan["served_name"],
            "api_url": plan["api"]["url"],
            "tool": tool,
            "api_key_env": plan["api"]["key_env"],
            "env_file": plan["env_file"],
            "state_dir": state,
            "plan_sha256": digest,
            "version_sha256": version,
            "sparkplay_version": doc["sparkplay_version"],
            "slot": doc.get("slot"),
            "watch_unit": units["watch"] if watch else None,
            "watchdog_unit": units["watchdog"] if watchdog else None,
            "watchdog_state": watchdog_state if watchdog else None,
            # started by the gateway when a request asks for it, stopped when idle (serve_on_demand)
            "on_demand": plan.get("on_demand", False),
            # every port this rank listens on (its API, its rendezvous): admission keeps them apart per node
            "ports": rank_ports(rank),
            # the folders the engine serves from: a file replaced there after it started is named by status
            # and restarts it under `verify` (the serve tool's explain)
            "models": checkpoints.served_folders(doc),
            # the gateway's bound on the engine's first byte for a request to it (serve_first_byte_timeout)
            "first_byte_s": first_byte,
        }
    plan["memory_claim"] = admission.stated_claim(recipe, merged)
    plan["probe"] = {
        "url": plan["api"]["url"],
        "model": plan["served_name"],
        "prompt": plan["health"]["prompt"],
        "timeout_s": plan["health"]["timeout_s"],
    }
    return {**doc, "launch": plan}


def _launch(
    doc: Mapping[str, Any],
    recipe: Mapping[str, Any],
    nodes: Sequence[Node],
    merged: Mapping[str, Any],
    slot: str | None,
    port: int,
) -> dict[str, Any]:
    """The engines' launch plan of the deployment in `slot` with its API on `port`."""
    options = Options(
        model_root=doc["paths"]["model_root"],
        bind=_reachable_bind(doc, nodes),
        port=port,
        knobs=dict(merged["serve_knobs"] or {}),
        health_timeout_s=int(merged["serve_health_timeout"] or 0) or None,
        state_dir=checkpoints.absolute(str(merged["serve_state_dir"]), "serve_state_dir"),
        docker=doc["engine"]["docker"],
        allow=check_allow(merged["serve_allow"] or [], recipe),
        trusted_images=check_trusted(merged["serve_trusted_images"] or []),
        slot=slot,
        settings=merged,
    )
    plan = build(recipe, nodes, options)
    plan["on_demand"] = _on_demand(recipe, slot, merged["serve_on_demand"], len(nodes))
    if _off_leader(doc, nodes) and addresses.is_wildcard(plan["api"]["bind"]):
        plan["api"]["url"] = f"http://{nodes[0].address}:{plan['api']['port']}"  # where the gateway reaches it
    return plan


def rank_ports(rank: Mapping[str, Any]) -> list[int]:
    """The ports a rank of a launch plan listens on: its API's and the ones its peers meet it on."""
    return sorted(
        {int(entry["port"]) for entry in rank.get("listen") or []} | {int(p) for p in rank.get("peer_ports") or []}
    )


def _on_demand(recipe: Mapping[str, Any], slot: str | None, listed: Any, nodes: int) -> bool:
    """Whether this deployment is served on demand: an added one-node one the inventory's serve_on_demand
    names (the primary always serves)."""
    if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
        raise BadInput("serve_on_demand is not a list of recipe names", "write it as [NAME, ...]")
    if recipe["name"] not in listed:
        return False
    if slot is None:
        raise BadInput(
            f"serve_on_demand names {recipe['name']}, which this run serves as the primary (always on)",
            f"add it beside the primary instead (sparkplay up {recipe['name']} --add), or drop it from serve_on_demand",
        )
    if nodes > 1:
        raise BadInput(
            f"serve_on_demand names {recipe['name']}, which runs on {nodes} nodes; models on demand "
            "run on one node each",
            f"drop {recipe['name']} from serve_on_demand to serve it always",
        )
    return True


def _cable_bound(address: str) -> bool:
    """An engine bound to one address of the node (its cable's), not loopback or every address."""
    return not addresses.is_loopback(address) and not addresses.is_wildcard(address)


def _reachable_bind(doc: Mapping[str, Any], nodes: Sequence[Node]) -> str:
    """Where the API listens: stage one's answer (the one rule's, api_address), except that an added deployment
    on a node other than the leader listens on its cable address instead of loopback, where the gateway on the
    leader reaches it (the cable is the Sparks' own link; the inventory's serve_bind still decides first)."""
    bind = str(doc["api"]["bind"])
    if _off_leader(doc, nodes) and addresses.is_loopback(bind):
        return nodes[0].address
    return bind


def _off_leader(doc: Mapping[str, Any], nodes: Sequence[Node]) -> bool:
    """An added deployment on a node other than the cluster's leader (where the gateway runs)."""
    return doc.get("mode") == "add" and nodes[0].host != doc["leader"]


def public(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The deployment to print: an API key the recipe gave (now in a rank's env) shown by name only."""
    launch = doc.get("launch")
    key = (launch or {}).get("api", {}).get("key_env")
    if not key:
        return dict(doc)
    ranks = [
        {**r, "env": {k: ("(secret: kept in the 0600 env file)" if k == key else v) for k, v in r["env"].items()}}
        for r in launch["ranks"]
    ]
    return {**doc, "launch": {**launch, "ranks": ranks}}
