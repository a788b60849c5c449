"""What one rank of a launch plan lays on its node: its folders and files (each with its mode, its check before
it lands, and its content or the template that renders it), its units, the paths whose change restarts it, and
the readiness check its leader runs. The serve role loops over this instead of deciding in Jinja.

rank_layout() is pure: the launch plan (stage two of the Deployment), this rank's part of it, the deployment's
paths and unit names, the settings it reads (LAYOUT_DEFAULTS, by the settings lookup's `layout` stage) and the
rank's admitted memory claim. Templates stay Ansible's (they read the role's variables): an entry with
`template` is rendered by the role before the files are written.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkplay import admission, boundary, integrity, nodetools
from sparkplay.engines.context import STATE_DIR
from sparkplay.engines.names import TOOLS, UNIT_DIR
from sparkplay.engines.systemd import env_file

# The serve role's settings a rank's layout reads, with their defaults (roles/serve/defaults/main.yml states the
# same; tests/test_layout.py keeps the two equal). The watchdog's state file defaults to the state folder's.
LAYOUT_DEFAULTS: dict[str, Any] = {
    "serve_tool": TOOLS["serve"],
    "serve_state_dir": STATE_DIR,
    "serve_watchdog_state": None,
    "serve_watchdog_metrics_port": 9899,
    "serve_wait_interval": 2,
    "serve_smoke_max_tokens": 16,
    "serve_memory_guard": True,
}
# the leader's quick check before anything starts: a model already answering answers within this
QUICK_READY_S = 20
TEMPLATES = {
    "firewall": "sparkplay-peer-firewall.service.j2",
    "unit": "sparkplay-serve.service.j2",
    "watch": "sparkplay-serve-watch.service.j2",
    "watchdog": "sparkplay-serve-watchdog.service.j2",
}


def record_text(record: Mapping[str, Any], claim: Mapping[str, Any] | None) -> str:
    """The rank's record as Ansible's to_nice_json writes it (the bytes earlier runs wrote stay unchanged)."""
    return json.dumps({**record, "claim": claim}, indent=4, sort_keys=True, separators=(",", ": "))


def answer_args(plan: Mapping[str, Any], rank: Mapping[str, Any]) -> list[str]:
    """The watchdog's answer check: its mode, why an engine is exempt, and the folders it re-verifies."""
    answers = plan["health"].get("answers") or {"mode": "exempt", "why": "no rule for this plan"}
    argv = ["--answer-check", str(answers["mode"])]
    argv += ["--answer-why", str(answers["why"])] if answers.get("why") else []
    argv += ["--ckpt-tool", TOOLS["checkpoint"]]
    return argv + [f"--model-dir={folder}" for folder in rank["record"].get("models") or []]


def tool_file(tool: str) -> dict[str, Any]:
    """The serve tool as a file to write: sparkplay's own path, not guarded (each rank's and the gateway's)."""
    return {"path": tool, "content_base64": nodetools.app_base64("serve"), "mode": "0755", "managed": False}


def ready_argv(plan: Mapping[str, Any], tool: str, timeout: Any, settings: Mapping[str, Any]) -> list[str]:
    """The leader's readiness check: a real completion, every rank's unit watched (`sparkplay-serve ready`)."""
    api = plan["api"]
    argv = [
        tool,
        "ready",
        "--url",
        api["url"],
        "--model",
        plan["served_name"],
        "--unit",
        plan["unit"],
        "--timeout",
        str(timeout),
        "--interval",
        str(settings["serve_wait_interval"]),
        "--prompt",
        plan["health"]["prompt"],
        "--max-tokens",
        str(settings["serve_smoke_max_tokens"]),
        "--progress",
        "/run/sparkplay-serve-ready.json",
    ]
    argv += ["--container", plan["container"]] if plan.get("container") else []
    if api.get("key_env"):
        argv += ["--api-key-env", api["key_env"], "--env-file", plan["env_file"], "--env-format", plan["runtime"]]
    return argv + [f"--peer={rank['address']}" for rank in plan["ranks"] if rank["role"] != "leader"]


def rank_layout(
    plan: Mapping[str, Any],
    rank: Mapping[str, Any],
    deployment: Mapping[str, Any],
    settings: Mapping[str, Any],
    claim: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`serve_plan | sparkplay_rank_layout(serve_rank, sparkplay_deployment, settings, claim)`."""
    settings = {**LAYOUT_DEFAULTS, **settings}
    paths, units = deployment["paths"], deployment["units"]
    unit_dir, tool, record = paths["unit_dir"], settings["serve_tool"], paths["serve_record"]
    added = plan.get("slot") is not None
    own = [entry["path"] for entry in rank["files"]]
    unit_path = f"{unit_dir}/{plan['unit']}"
    watch = {"unit": units["watch"], "path": f"{unit_dir}/{units['watch']}"}
    watchdog = {"unit": units["watchdog"], "path": f"{unit_dir}/{units['watchdog']}"}
    wall = plan["firewall"]
    firewall = {"unit": wall["unit"], "path": f"{unit_dir}/{wall['unit']}", "file": wall.get("file")}
    watching = rank["record"].get("watch_unit") is not None
    watchdogging = rank["record"].get("watchdog_unit") is not None
    firewalling = bool(rank.get("firewall"))
    metrics_port = 0 if added else int(settings["serve_watchdog_metrics_port"])
    # the watchdog's state file: the inventory's for the primary, the added deployment's own (watchdog@NAME.json)
    state = rank["record"]["watchdog_state"] if added else settings["serve_watchdog_state"]
    timeout = plan["health"]["timeout_s"]
    needs = [need for need in plan["requires"] if need["host"] == rank["host"]]
    ready = ready_argv(plan, tool, timeout, settings)

    templates: list[dict[str, str]] = []

    def unit_file(kind: str, path: str, unit: str) -> dict[str, Any]:
        templates.append({"path": path, "template": TEMPLATES[kind]})
        return {"path": path, "validate": f"{tool} verify-unit %s {unit}"}

    files: list[dict[str, Any]] = [tool_file(tool), *rank["files"]]
    if firewalling:
        files += [
            {"path": firewall["file"], "content": rank["firewall"], "validate": f"{wall['nft']} --check --file %s"},
            unit_file("firewall", firewall["path"], firewall["unit"]),
        ]
    files += [
        {"path": plan["env_file"], "content": env_file(rank["env"], plan["runtime"]), "mode": "0600", "secret": True},
        unit_file("unit", unit_path, plan["unit"]),
    ]
    files += [unit_file("watch", watch["path"], watch["unit"])] if watching else []
    files += [unit_file("watchdog", watchdog["path"], watchdog["unit"])] if watchdogging else []
    files += [{"path": record, "content": record_text(rank["record"], claim)}]
    leader = next(r for r in plan["ranks"] if r["role"] == "leader")
    return {
        "unit_path": unit_path,
        "watch": watch | {"wanted": watching},
        "watchdog": watchdog
        | {
            "wanted": watchdogging,
            "state": state,
            "metrics_port": metrics_port,
            # held to the deploy's answer (engines/answers.py); files it re-verifies when that changes
            "answer_args": answer_args(plan, rank),
        },
        "firewall": firewall | {"wanted": firewalling},
        "timeout": timeout,
        "plan_leader": leader["host"],
        "peers": [r["address"] for r in plan["ranks"] if r["role"] != "leader"],
        "requires": needs,
        # what the preflight's probe looks for: what the plan needs here, and whether the units exist yet
        "probe_paths": [need["path"] for need in needs] + [unit_path, watchdog["path"]],
        "packages": (["nftables"] if firewalling else [])
        + (["python3-prometheus-client"] if watchdogging and metrics_port > 0 else []),
        "folders": _unique([posixpath.dirname(tool), posixpath.dirname(plan["env_file"]), *plan["directories"]]),
        "home": [{"path": plan["home"], "owner": plan["user"], "group": plan["user"], "mode": "0750"}]
        if plan.get("user") is not None
        else [],
        "files": files,  # a unit's entry has no content until rendered (files_with_units)
        "templates": templates,
        "managed_paths": [unit_path, plan["env_file"], record, *own]
        + ([watch["path"]] if watching else [])
        + ([watchdog["path"]] if watchdogging else [])
        + ([firewall["file"], firewall["path"]] if firewalling else []),
        # a change to any of these restarts the rank's engine; to any unit, systemd reloads first
        "restart_paths": [plan["env_file"], unit_path, *own],
        "unit_paths": [unit_path, watch["path"], watchdog["path"], firewall["path"]],
        "units": [plan["unit"]]
        + ([firewall["unit"]] if firewalling else [])
        + ([watch["unit"]] if watching else [])
        + ([watchdog["unit"]] if watchdogging else []),
        "memory_limit": admission.memory_limit(claim) if _true(settings["serve_memory_guard"]) else None,
        "ready_argv": ready,
        "quick_ready_argv": ready_argv(plan, tool, QUICK_READY_S, settings),
        # what the wait after a start adds: where it keeps the start's receipt (the serve tool's receipt.py)
        "receipt_argv": ["--receipt", integrity.receipt_file(str(settings["serve_state_dir"]), plan["unit"])],
        "last_good_file": f"{settings['serve_state_dir']}/{paths['last_good']}",
        # what the last deployment that answered was (the role adds the rendered files: the whole of it)
        "last_good": {
            "recipe": plan["recipe"],
            "served_name": plan["served_name"],
            "role": rank["role"],
            "unit": plan["unit"],
            "watch": watch["unit"] if watching else None,
            "watchdog": watchdog["unit"] if watchdogging else None,
            "files": None,
            "ready_argv": ready if rank["role"] == "leader" else None,
            # what the boundary let it ask for (serve_allow's names): a rollback needs them allowed still
            "privileged": list(plan.get("privileged") or []),
        },
    }


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _true(value: Any) -> bool:
    """Ansible's `| bool` for a setting from the inventory (true, yes, on, 1)."""
    return value is True or str(value).strip().lower() in ("true", "yes", "on", "1")


def files_with_units(layout: Mapping[str, Any], rendered: Mapping[str, str]) -> list[dict[str, Any]]:
    """`serve_layout | sparkplay_layout_files(rendered)`: the rank's files, each unit's content the text its
    template rendered (`rendered`: path -> text)."""
    units = {t["path"] for t in layout["templates"]}
    missing = sorted(units - set(rendered))
    if missing:
        raise ValueError(f"units not rendered: {', '.join(missing)}")
    return [
        {**entry, "content": rendered[entry["path"]]} if entry["path"] in units else entry for entry in layout["files"]
    ]


def last_good_text(layout: Mapping[str, Any], files: Sequence[Mapping[str, Any]]) -> str:
    """What this rank keeps as its last good deployment (JSON): the layout's last_good with the files it
    wrote (`files`: sparkplay_layout_files's; the serve tool, first, is the node's and left out)."""
    return json.dumps({**layout["last_good"], "files": list(files[1:])})


def go_back(docs: Iterable[Any], differs: Iterable[Any]) -> bool:
    """Whether the ranks' kept deployments (`docs`, each rank's that has one) make one to go back to: one
    leader among them, and on some rank it differs from what runs now (after a failed change: not the
    deployment that just failed)."""
    leaders = [d for d in docs if isinstance(d, Mapping) and d.get("role") == "leader"]
    return len(leaders) == 1 and any(differs)


UNIT_NAME = re.compile(r"^sparkplay-[a-z0-9-]+(@[a-z0-9][A-Za-z0-9._-]*)?\.service\Z")


def rollback_refusal(doc: Any, allow: Iterable[Any], folders: Iterable[str], tool: str) -> str | None:
    """Why the kept deployment `doc` may not be put back (None when it may), checked as `up` checks a plan: what
    it was allowed must be allowed now (serve_allow), and the record is held to sparkplay's own places (units
    named as sparkplay names them in systemd's folder, files in `folders`, the readiness check the serve tool)
    rather than used as it is."""
    if not isinstance(doc, Mapping):
        return None
    if not isinstance(doc.get("privileged"), list):
        return (
            f"the kept deployment of {doc.get('recipe')} predates the record of what it was allowed, so it cannot be "
            "checked against serve_allow: run `sparkplay up` with the recipe instead"
        )
    granted = {str(entry) for entry in allow}
    if missing := [str(p) for p in doc["privileged"] if str(p) not in granted]:
        return (
            f"{doc.get('recipe')} needs {', '.join(missing)}, which serve_allow no longer grants: allow "
            "it again in the inventory, or run `sparkplay up` with a recipe that does without"
        )
    units = [doc.get(k) for k in ("unit", "watch", "watchdog") if doc.get(k) is not None]
    if bad := [str(u) for u in units if not UNIT_NAME.match(str(u))]:
        return f"the kept deployment names unit {bad[0]!r}, which is no unit sparkplay writes"
    places = [posixpath.normpath(f) for f in folders if f]
    for entry in doc.get("files") or []:
        path = str(entry.get("path", "")) if isinstance(entry, Mapping) else ""
        unit_file = posixpath.dirname(path) == UNIT_DIR and UNIT_NAME.match(posixpath.basename(path))
        if posixpath.normpath(path) != path or not (unit_file or boundary.inside(path, places)):
            return f"the kept deployment writes {path!r}, outside sparkplay's own places"
    ready = doc.get("ready_argv")
    if ready is not None and (not isinstance(ready, list) or not ready or ready[0] != tool):
        return "the kept deployment's readiness check is not sparkplay's serve tool"
    return None


def plan_rank(launch: Mapping[str, Any], host: str | None = None) -> dict[str, Any] | None:
    """The rank a launch plan gives `host` (None where it runs none); without a host, the leader's."""
    for rank in launch.get("ranks") or ():
        if (rank.get("host") == host) if host is not None else (rank.get("role") == "leader"):
            return dict(rank)
    return None
