"""The deployments a cluster serves, read back from the records each rank keeps: the gateway's routes.

Every rank of a deployment keeps a record (engines/names.py says where: the primary's at the inventory's
sparkplay_serve_record, an added one's under /etc/sparkplay/serve.d). The records are the admitted set: admission
counts their claims, the gateway routes to their leaders, `status` lists them, `stop` and `reset` find units.
"""

from __future__ import annotations

import base64
import contextlib
import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from sparkplay import addresses, layout, node_memory
from sparkplay.engines import names, systemd
from sparkplay.errors import BadInput

# the gateway's names on the leader: its unit and user; the routes file (root's, 0644); its folder of secrets
# (root:USER 0750: the endpoint's keys and each deployment's own key, upstream/SLOT.key, 0640); its virtualenv
GATEWAY = {
    "unit": "sparkplay-gateway.service",
    "routes": "/etc/sparkplay/gateway-routes.json",
    "user": "sparkplay-gateway",
    "secrets": "/etc/sparkplay/gateway",
    "client_keys": "/etc/sparkplay/gateway/keys",
    "upstream_keys": names.GATEWAY_UPSTREAM_KEYS,
    "state": "/run/sparkplay-gateway/state.json",
    "swapper_unit": "sparkplay-swapper.service",
    "swapper_socket": "/run/sparkplay-swapper/swapper.sock",
    "venv": "/opt/sparkplay/gateway",
}
# (where it listens is the serve role's serve_gateway_bind / serve_gateway_port, written there once)
TOOL_PATH = re.compile(r"^(/[A-Za-z0-9_+-][A-Za-z0-9_.+-]*)+\Z")  # a plain absolute path, no '..'/'.' parts
MODEL_PATH = re.compile(r"^(/[A-Za-z0-9_+-][A-Za-z0-9_.+-]*){2,}\Z")  # the same, two parts deep at least


def records(contents: Mapping[str, Mapping[str, str | None]]) -> list[dict[str, Any]]:
    """Every record as {host, path, ...record}, from host -> {path: text} (the probe's read and read_dir)."""
    found = []
    for host, files in sorted(contents.items()):
        for path, text in sorted((k, v) for k, v in (files or {}).items() if v is not None):
            try:
                record = json.loads(text)
            except ValueError:
                raise BadInput(
                    f"{host}:{path} is not a deployment record (not JSON)", "remove it, or run reset"
                ) from None
            if isinstance(record, dict) and record.get("unit"):
                found.append(_named_by_slot(record, host, path))
    return found


def _named_by_slot(record: Mapping[str, Any], host: str, path: str) -> dict[str, Any]:
    """The record with every name sparkplay acts on (units, container, env file) derived from its slot, which
    the record's own path gives (an added one's is serve.d/SLOT.json; anything else is the primary's): a
    record is data, so one naming `ssh.service` as its unit stops sparkplay's unit, never ssh."""
    slot = None
    if posixpath.dirname(path) == names.ADDED_DIR:
        slot = posixpath.basename(path).removesuffix(".json")
        if not path.endswith(".json") or not names.SLOT.match(slot):
            raise BadInput(f"{host}:{path} is no deployment record's name", "remove it, or run reset")
    if record.get("slot") not in (None, slot):
        raise BadInput(
            f"{host}:{path} says it is deployment {record.get('slot')!r}, but its file is {slot!r}'s",
            "remove it, or run reset",
        )
    named = names.for_slot(slot)
    tool = str(record.get("tool") or "")
    return {
        **record,
        "host": host,
        "path": path,
        "slot": slot,
        "unit": named["units"]["serve"],
        "watch_unit": named["units"]["watch"] if record.get("watch_unit") else None,
        "watchdog_unit": named["units"]["watchdog"] if record.get("watchdog_unit") else None,
        "container": named["container"],
        "env_file": named["env_file"],
        "firewall_unit": named["units"]["firewall"],
        # the serve tool the serve role installed (serve_tool moves it): a plain absolute path
        "tool": tool if TOOL_PATH.match(tool) else None,
        # where its engine reads (status names a file replaced there): plain paths two deep, no disk walked whole
        "models": [m for m in record.get("models") or [] if isinstance(m, str) and MODEL_PATH.match(m)]
        if isinstance(record.get("models"), list)
        else [],
    }


def routes(
    found: Iterable[Mapping[str, Any]],
    drop_slots: Iterable[Any] = (),
    new: Mapping[str, Any] | None = None,
    new_host: str | None = None,
    default: str | None = None,
    demand: Mapping[str, Any] | None = None,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The gateway's routes file: each served name to its deployment's API, from the leaders' records less
    the slots `drop_slots` (one being replaced or stopped) plus the record `new` (this run's, on `new_host`),
    and the model a request without `model` goes to: `default` (a served name, or the recipe serving one) when
    it is served, else the primary's. A model served on demand carries its claim and units; `demand` (the serve
    role's {ttl_s, wait_s, budget_gib, meminfo: {host: /proc/meminfo}}) gives each node's budget for them, and
    the TTL and wait; without it (the stop role) they carry over from `previous`, the file as it was."""
    dropped = set(drop_slots)
    leaders = [r for r in found if r.get("role") == "leader" and r.get("slot") not in dropped]
    leaders.sort(key=lambda r: (r.get("slot") is not None, str(r.get("slot"))))
    if new is not None:  # this run's deployment routes its served name, whatever else serves it
        leaders.append({**new, "host": new_host, "new": True})
    models: dict[str, dict[str, Any]] = {}
    for record in leaders:
        if names.stands_in_for(record.get("slot")) and record["served_name"] in models and not record.get("new"):
            continue  # a stand-in has its model's route only from its own run until its deployment is back
        route = {
            "url": str(record["api_url"]),
            "recipe": record.get("recipe"),
            "slot": record.get("slot"),
            "host": record.get("host"),
        }
        if isinstance(bound := record.get("first_byte_s"), int) and bound > 0:  # none: the gateway's --timeout
            route["first_byte_s"] = bound
        if record.get("watchdog_unit") and TOOL_PATH.match(str(record.get("watchdog_state"))):
            route["watch"] = str(record["watchdog_state"])  # read by the gateway on that node alone
        if record.get("unit"):  # the gateway reads its memory where it runs on the gateway's node
            route["unit"] = str(record["unit"])
        if record.get("on_demand") and record.get("slot"):
            named = names.for_slot(str(record["slot"]))["units"]
            units = [named["serve"], *([named["watchdog"]] if record.get("watchdog_unit") else [])]
            route |= {"on_demand": True, "claim": int((record.get("claim") or {}).get("bytes") or 0), "units": units}
        models[str(record["served_name"])] = route
    by_recipe = [n for n, r in models.items() if default and r["recipe"] == default]  # one only (admission's rule)
    named_default = [default] if default in models else by_recipe if len(by_recipe) == 1 else []
    primary = [n for n, r in models.items() if r["slot"] is None]
    table: dict[str, Any] = {"models": models, "default": (named_default or primary or [None])[0]}
    claims = node_memory.counted(found, drop_slots, {**new, "host": new_host} if new else None)
    if demand is not None:
        table |= {
            "ttl_s": float(demand["ttl_s"]),
            "wait_s": float(demand["wait_s"]),
            "budgets": node_memory.budgets(claims, demand),
            "nodes": node_memory.nodes(claims, demand),
        }
    else:
        table |= {k: (previous or {})[k] for k in ("ttl_s", "wait_s", "budgets") if k in (previous or {})}
        if isinstance((previous or {}).get("nodes"), dict):  # the stop role: what is left counted, totals kept
            table["nodes"] = node_memory.recount(previous["nodes"], claims)
    return table


def moved(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[dict[str, str]]:
    """The served names whose route a new routes file moves to another API: {model, from, to} each (the
    gateway drains `from` before the deployment behind it stops)."""
    was = (before or {}).get("models") if isinstance((before or {}).get("models"), dict) else {}
    return [
        {"model": name, "from": str(was[name].get("url")), "to": str(route["url"])}
        for name, route in sorted(after["models"].items())
        if isinstance(was.get(name), dict) and was[name].get("url") != route["url"]
    ]


def update_beside(
    found: Iterable[Mapping[str, Any]], launch: Mapping[str, Any], wanted: bool = True, refused: str = ""
) -> dict[str, Any]:
    """Whether the stand-in `launch` plans (names.STANDIN: an added deployment's update, its first pass) is
    wanted: {beside, why}. Wanted when its deployment serves on the one node the stand-in runs on, always on, and
    was deployed from other inputs (its plan_sha256 is not the stand-in's version_sha256), the stand-in admitted
    beside it (`refused`: admission's line otherwise) and serve_update_beside (`wanted`) not false; otherwise the
    update (if any) happens in place in the next pass."""
    base = names.stands_in_for(launch.get("slot"))
    if base is None:
        return {"beside": False, "why": "not an added deployment's update"}
    ranks = launch["ranks"]
    running = [r for r in found if r.get("slot") == base and r.get("role") == "leader"]
    if not running:
        return {"beside": False, "why": f"{base} is not served yet: it starts as itself"}
    if len(ranks) != 1 or launch.get("on_demand") or running[0].get("host") != ranks[0]["host"]:
        return {"beside": False, "why": f"{base} runs on more than one node, on demand or elsewhere: updated in place"}
    if running[0].get("plan_sha256") == ranks[0]["record"]["version_sha256"]:
        return {"beside": False, "why": f"{base} is unchanged"}
    if not wanted:
        return {"beside": False, "why": f"serve_update_beside is false: {base} is updated in place"}
    if refused:
        return {
            "beside": False,
            "why": f"{base}'s new version does not fit beside the running one ({refused}): "
            "updated in place, its requests failing while it restarts",
        }
    return {"beside": True, "why": f"{base} changed: its new version starts beside the running one first"}


def gateway_secret(path: str, lines: Iterable[str], group: str) -> dict[str, Any]:
    """A file of the gateway's secrets (its keys, an engine's key): one a line, root:GROUP 0640, written as a
    secret (its bytes never in a diff or a log)."""
    return {
        "path": path,
        "content": "".join(f"{line}\n" for line in lines),
        "owner": "root",
        "group": group,
        "mode": "0640",
        "secret": True,
    }


def gateway_key_file(read: Mapping[str, Any], group: str) -> dict[str, Any] | None:
    """The gateway's copy of another deployment's engine key (root:GROUP 0640, written as a secret), from a
    slurp of its env file (`read`: the loop result, its item the deployment's record); None without a key."""
    record = read.get("item") or {}
    text = base64.b64decode(str(read.get("content") or "")).decode(errors="replace")
    key = systemd.env_value(text, str(record.get("api_key_env") or ""), str(record.get("runtime") or "docker"))
    return gateway_secret(names.upstream_key(record.get("slot")), [key], group) if key else None


def key_lines(text: str | None) -> list[str]:
    """The keys of a keys file: one a line, blank lines and `#` comments left out."""
    return [line.strip() for line in str(text or "").splitlines() if line.strip() and not line.strip().startswith("#")]


def gateway_layout(
    launch: Mapping[str, Any],
    slot: str | None,
    gateway: Mapping[str, Any],
    keys: Iterable[str],
    listen: tuple[str, int],
    other_envs: Iterable[Mapping[str, Any]],
    unit_dir: str,
    tool: str,
    claims: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What the gateway lays on the leader for this run (the serve role's tasks/gateway.yml): this deployment's
    leader rank; the secret files (the endpoint's keys, this deployment's engine key, the other deployments'
    from their env files as `other_envs` read them), the serve tool it runs, its unit's path, where it listens
    and where a client on the leader reaches it; the leader rank's record for the routes, with its host and
    the memory claim admission worked out (`claims`, host -> claim). (The cluster's leader may run no rank
    of this deployment.)"""
    leader = next(rank for rank in launch["ranks"] if rank["role"] == "leader")
    keys, key_env, user = list(keys), leader["record"].get("api_key_env"), gateway["user"]
    secrets = [gateway_secret(gateway["client_keys"], keys, user)] if keys else []
    if key_env and (leader.get("env") or {}).get(key_env):
        secrets.append(gateway_secret(names.upstream_key(slot), [leader["env"][key_env]], user))
    secrets += [found for read in other_envs if "content" in read if (found := gateway_key_file(read, user))]
    bind, port = listen
    host = f"[{bind}]" if ":" in bind else bind
    return {
        "leader_rank": leader,
        "route_record": {
            **leader["record"],
            "host": leader["host"],
            "claim": (claims or {}).get(leader["host"]),
            "claims": dict(claims or {}),
        },
        "secret_files": secrets,
        "tool_file": layout.tool_file(tool),
        "unit_path": f"{unit_dir}/{gateway['unit']}",
        "listen": f"{host}:{port}",
        "client": addresses.client_address(bind),
    }


def any_added(records: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a deployment was added beside the primary (the gateway runs from then on)."""
    return any(r.get("slot") for r in records)


def key_holders(records: Iterable[Mapping[str, Any]], slot: str | None) -> list[dict[str, Any]]:
    """The leaders of the deployments but `slot` whose engine asks for a key (read back from its env file)."""
    return [dict(r) for r in records if r.get("role") == "leader" and r.get("api_key_env") and r.get("slot") != slot]


def gateway_row(
    routes_text: str | None, show: str | None, host: str, state_text: str | None = None
) -> dict[str, Any] | None:
    """`status`'s line for the gateway on `host`, from its routes file, `systemctl show -p ActiveState -p
    ExecStart` of its unit and its state file: where it listens, whether it asks for keys, its state, each
    model it routes with the model's state (serving, loading, stopped on demand), and the default; None where
    it does not run (no routes file)."""
    if not routes_text:
        return None
    table = _json(routes_text)
    props = dict(line.split("=", 1) for line in str(show or "").splitlines() if "=" in line)
    argv = re.search(r"argv\[\]=([^;]*)", props.get("ExecStart", ""))
    words = argv.group(1).split() if argv else []
    listen = words[words.index("--listen") + 1] if "--listen" in words[:-1] else None
    host_part = listen.rpartition(":")[0] if listen else ""
    if addresses.is_wildcard(host_part):  # say where it answers on the node
        listen = listen and f"{addresses.LOOPBACK_ADDRESS}:{listen.rpartition(':')[2]}"
    state = props.get("ActiveState") or "unknown"
    models = sorted(table["models"]) if isinstance(table.get("models"), dict) else []
    url = f"http://{listen}/v1" if listen else "(unit not found)"
    said = _json(state_text).get("models") if state == "active" else None
    routed = table.get("models") if isinstance(table.get("models"), dict) else {}
    states = {n: _model_state(n, routed.get(n) or {}, said) for n in models}
    row = {
        "host": host,
        "url": url,
        "keys_required": "--keys" in words,
        "state": state,
        "up": state == "active",
        "models": models,
        "model_states": states,
        "receipts": {n: m.get("receipt") for n, m in (said or {}).items() if isinstance(m, dict) and n in states},
        "default": table.get("default"),
    }
    row["line"] = (
        f"gateway on {host}: {url} ({'keys required' if row['keys_required'] else 'no key asked'}), {state}, routes "
        + (", ".join(f"{n} ({s})" for n, s in states.items()) or "nothing")
        + f"; a request without `model` goes to {row['default'] or 'no model (404)'}"
    )
    return row


def of_slot(found: Iterable[Mapping[str, Any]], name: str | None) -> list[dict[str, Any]]:
    """The records of the deployment `name` (a recipe's name; its added slot, or the primary serving it)."""
    return [dict(r) for r in found if name is None or r.get("slot") == name or r.get("recipe") == name]


def gateway(_: Any = None) -> dict[str, Any]:
    """The gateway's names (node_constants passes them to Ansible): its unit, routes file, default address."""
    return dict(GATEWAY)


def added_rows(
    shows: Iterable[Mapping[str, Any]],
    probes: Iterable[Mapping[str, Any]],
    explained: Iterable[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """`status`'s rows of the added deployments: each loop result of `systemctl show` (its item the record) and,
    in the same order, of the serve tool's probe of its API (a completion where it asked for one) and of its
    `explain` (why the unit is not serving)."""
    rows = []
    shows, probes = list(shows), list(probes)
    whys = [_json(e.get("stdout")).get("why") for e in (explained or [])] or [None] * len(shows)
    for show, probe, why in zip(shows, probes, whys, strict=True):
        record = show["item"]
        props = dict(line.split("=", 1) for line in str(show.get("stdout", "")).splitlines() if "=" in line)
        try:
            seen = json.loads(probe.get("stdout") or "{}")
        except ValueError:
            seen = {}
        state = props.get("ActiveState") or "unknown"
        state += f"/{props['SubState']}" if props.get("SubState") else ""
        healthy = bool(seen.get("health")) and bool(seen.get("served")) and seen.get("answers", True) is not False
        row = {
            "recipe": record.get("recipe"),
            "host": record["host"],
            "unit": record.get("unit"),
            "state": state,
            "restarts": int(props.get("NRestarts") or 0),
            "health": "ok" if healthy else "down",
            "model": record.get("served_name"),
            "api_url": record.get("api_url"),
            "claim_gib": round(int((record.get("claim") or {}).get("bytes") or 0) / 1024**3, 1),
            "up": state.startswith("active") and healthy,
            "why": why or (seen.get("why") if not healthy else None),
            "receipt": seen.get("receipt"),  # its last start's (the serve tool's ready wrote it)
        }
        if record.get("on_demand") and state.startswith("inactive"):  # stopped by design, not by a fault
            row |= {
                "health": "on demand",
                "up": True,
                "why": "stopped on demand: the gateway starts it when a request names it",
            }
        # a stand-in: an update's new version, beside its deployment until that one restarted with it
        row["standin"] = names.stands_in_for(record.get("slot")) is not None
        label = f"{row['recipe']} (its update's new version, standing in)" if row["standin"] else row["recipe"]
        row["line"] = (
            f"{label} on {row['host']}: {row['unit']} {state}, {row['health']}, serving "
            f"{row['model']} at {row['api_url']}, claims {row['claim_gib']} GiB"
            + (f": {row['why']}" if row["why"] else "")
        )
        rows.append(row)
    return rows


def _model_state(name: str, route: Mapping[str, Any], said: Any) -> str:
    """What the gateway says of a model, or what is known without it (on demand: not asked for yet)."""
    seen = said.get(name) if isinstance(said, dict) else None
    if isinstance(seen, dict) and seen.get("state") in ("serving", "loading", "stopped on demand"):
        return str(seen["state"]) + (" on demand" if route.get("on_demand") and seen["state"] == "serving" else "")
    return "on demand, not asked for yet" if route.get("on_demand") else "always on"


def _json(text: Any) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        found = json.loads(str(text or "{}"))
        return found if isinstance(found, dict) else {}
    return {}
