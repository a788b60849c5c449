"""What each deployment is called on a node: its units, container, env file, record and watchdog state.

A cluster serves one primary deployment (plain `up`: today's names, so one-model users and upgrades see
nothing new) and any number of added ones (`up --add`), each keyed by its recipe's name, its slot. An added
deployment's names carry the slot: systemd's instance syntax for units (`sparkplay-serve@coder.service`, a
complete unit file of that name, no template), a suffix for the rest. Recipe names are `[a-z0-9._-]`
(the schema), which every one of these accepts as it is.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from sparkplay import integrity
from sparkplay.engines import firewall
from sparkplay.engines.context import STATE_DIR

# where they are written (systemd's folder for the administrator's units)
UNIT_DIR = "/etc/systemd/system"
# sparkplay's tools on a node (built from sparkplay.nodetools, written by the checkpoint and serve roles)
TOOLS = {"checkpoint": "/usr/local/lib/sparkplay/sparkplay-ckpt", "serve": "/usr/local/lib/sparkplay/sparkplay-serve"}
# every unit sparkplay writes on a node, by its part, in the order they stop: the leader's watchdog and
# watcher (restarts the leader when a worker restarts) before the engine they would restart, the inter-rank
# firewall last
UNITS = {
    "watchdog": "sparkplay-serve-watchdog.service",
    "watch": "sparkplay-serve-watch.service",
    "serve": "sparkplay-serve.service",
    "firewall": firewall.UNIT,
}
CONTAINER = "sparkplay-serve"
ENV_FILE = "/etc/sparkplay/serve.env"
# the primary's record (the inventory's sparkplay_serve_record moves it); added deployments' sit here
RECORD = "/etc/sparkplay/serve.json"
ADDED_DIR = "/etc/sparkplay/serve.d"
WATCHDOG_STATE = "watchdog.json"
# the last deployment that answered, kept to go back to (under the state folder; `.previous` beside it)
LAST_GOOD = "last-good/serve.json"
# a recipe's name, as the schema has it: the slot becomes part of file and unit names; or an added
# deployment's stand-in while it is updated (docs/serving.md "Updating an added deployment"): its new version
# under the slot's name and this suffix, upper case so that no recipe's name is ever a stand-in's, listening
# on the API port + STANDIN_PORT_OFFSET
STANDIN = ".NEW"
STANDIN_PORT_OFFSET = 1000
SLOT = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}(\.NEW)?\Z")


def standin(slot: str) -> str:
    """The slot of `slot`'s stand-in."""
    return for_slot(f"{slot}{STANDIN}")["slot"]


def stands_in_for(slot: str | None) -> str | None:
    """The slot a stand-in's slot stands in for; None for any other."""
    return slot.removesuffix(STANDIN) if slot and slot.endswith(STANDIN) else None


def for_slot(slot: str | None, record: str = RECORD) -> dict[str, Any]:
    """The names of the deployment in `slot` (None: the primary, with `record` where the inventory keeps it)."""
    if slot is not None and not SLOT.match(str(slot)):
        raise ValueError(f"deployment name {slot!r} is not a recipe name ([a-z0-9._-], up to 64) or its stand-in's")
    if slot is None:
        return {
            "slot": None,
            "units": dict(UNITS),
            "container": CONTAINER,
            "env_file": ENV_FILE,
            "record": record,
            "watchdog_state": WATCHDOG_STATE,
            "last_good": LAST_GOOD,
        }
    return {
        "slot": slot,
        "units": {part: unit.replace(".service", f"@{slot}.service") for part, unit in UNITS.items()},
        "container": f"{CONTAINER}-{slot}",
        "env_file": posixpath.join(ADDED_DIR, f"{slot}.env"),
        "record": posixpath.join(ADDED_DIR, f"{slot}.json"),
        "watchdog_state": f"watchdog@{slot}.json",
        "last_good": LAST_GOOD.replace(".json", f"@{slot}.json"),
    }


# the system user a native engine runs as: the primary's, and one per added deployment (its own uid, so no
# engine reads another's home, caches or /proc entries: its environment holds the API key)
ENGINE_USER = "sparkplay-engine"
# llama-benchy's own user: the bench holds a deployment's key (in its arguments), so it never runs as a user an
# engine runs as (the primary's engine could read an added deployment's key from its process)
BENCH_USER = "sparkplay-bench"
ADDED_USER_PREFIX = "sparkplay-e-"


def engine_user(slot: str | None) -> str:
    """The primary's engine user, or the added deployment's: a prefix and 12 hex digits of the slot's sha256
    (a slot may be 64 characters; a user name is at most 32)."""
    if slot is None:
        return ENGINE_USER
    return ADDED_USER_PREFIX + hashlib.sha256(for_slot(slot)["slot"].encode()).hexdigest()[:12]


def slotted(path: str, slot: str | None) -> str:
    """A folder of the deployment's own: the primary's `path`, an added deployment's `path@SLOT`."""
    return path + (f"@{slot}" if slot is not None else "")


def engine_home(state: str, slot: str | None) -> str:
    """The engine user's home, the only folder its sandbox writes (its caches live there)."""
    return slotted(f"{state.rstrip('/')}/engine", slot)


def cache_dir(state: str, slot: str | None, engine: str) -> str:
    """An engine container's cache folder (compiled kernels, generated code): the deployment's own, so what
    one deployment writes there no other loads."""
    return slotted(f"{state.rstrip('/')}/cache/{engine}", slot)


# the gateway's folder of each deployment's own engine key (deployments.GATEWAY has the rest of its names)
GATEWAY_UPSTREAM_KEYS = "/etc/sparkplay/gateway/upstream"


# the primary's key file: a name no slot can have (SLOT starts with a letter or digit), so a recipe named
# `primary` added beside it gets a key file of its own, never the primary's
PRIMARY_KEY = "@primary"


def upstream_key(slot: str | None) -> str:
    """The file the gateway reads a deployment's engine key from (`@primary.key` for the primary's)."""
    return posixpath.join(GATEWAY_UPSTREAM_KEYS, f"{slot or PRIMARY_KEY}.key")


def leftovers(records: list[dict[str, Any]], state_dir: str = STATE_DIR) -> list[str]:
    """The files an added deployment leaves once stopped (its record, env file, units, and the last good
    deployment a rollback would bring back, with the env file and key it keeps), from its slot's names, never
    from paths a record holds."""
    found: list[str] = []
    for record in records:
        if record.get("slot"):
            named = for_slot(str(record["slot"]))
            found += [named["record"], named["env_file"], firewall.names(str(record["slot"]))["file"]]
            found += [posixpath.join(UNIT_DIR, named["units"][part]) for part in ("serve", "watchdog", "firewall")]
            kept = posixpath.join(state_dir, named["last_good"])
            found += [kept, kept.removesuffix(".json") + ".previous.json"]
            found.append(integrity.receipt_file(state_dir, named["units"]["serve"]))  # its last start's receipt
    return found


def added_users(passwd: Mapping[str, Any] | None) -> list[str]:
    """The added deployments' engine users among a node's passwd entries (getent's, name -> fields): each
    ran as a user of its own, its slot's hash in the name."""
    pattern = re.compile(re.escape(ADDED_USER_PREFIX) + r"[0-9a-f]{12}\Z")
    return [name for name in passwd or {} if pattern.match(name)]
