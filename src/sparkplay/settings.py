"""The settings an inventory may change, declared once: each with its default, listed by the stage of the
Deployment that reads it (sparkplay.deployment: stage one, stage two's launch; sparkplay.layout: what a rank
lays on its node).

Lookup `sparkplay_settings` (playbooks/recipe.yml, the serve role) and the CLI read exactly these lists; a role
states the same defaults for Ansible (tests/test_deployment.py and tests/test_layout.py keep them equal). A new
setting is one entry here, with its default, and one role default: an engine adapter reads a launch setting as
`ctx.options.settings[KEY]` (tests/test_new_setting.py). Beside them, what every node holds whatever the
deployment (node_constants), for the roles that run without one.
"""

from __future__ import annotations

from typing import Any

from sparkplay import stack
from sparkplay.boundary import TRUSTED_IMAGES
from sparkplay.engines.context import STATE_DIR
from sparkplay.engines.names import (
    ADDED_DIR,
    ADDED_USER_PREFIX,
    BENCH_USER,
    ENGINE_USER,
    RECORD,
    TOOLS,
    UNIT_DIR,
    UNITS,
)
from sparkplay.errors import BadInput
from sparkplay.layout import LAYOUT_DEFAULTS
from sparkplay.served import gateway

# The settings an inventory may change, with their defaults. roles/sparkplay/defaults/main.yml
# states the same values for Ansible; tests/test_deployment.py keeps the two equal.
DEFAULTS: dict[str, Any] = {
    "sparkplay_model_root": "/var/lib/sparkplay/models",
    "sparkplay_fabric_env_file": "/etc/sparkplay/fabric.env",
    "sparkplay_serve_record": RECORD,
    "sparkplay_docker": "/usr/bin/docker",
}
# The inventory's API address (the serve role's serve_bind / serve_port): empty or 0 keeps the recipe's.
API_SETTINGS = ("serve_bind", "serve_port")
# serve_mode: `replace` the primary deployment (plain `up`), or `add` one beside what is served (`up --add`)
MODES = ("replace", "add")
# The serve role's settings stage two reads, with their defaults (roles/serve/defaults/main.yml states the
# same; tests/test_deployment.py keeps the two equal). The watchdog's state file defaults to the state folder's.
LAUNCH_DEFAULTS: dict[str, Any] = {
    "serve_knobs": {},
    "serve_allow": [],
    "serve_trusted_images": list(TRUSTED_IMAGES),
    "serve_health_timeout": 0,
    "serve_state_dir": STATE_DIR,
    "serve_tool": TOOLS["serve"],
    "serve_worker_wait": 0,
    "serve_watchdog_enabled": True,
    "serve_watchdog_state": None,
    "serve_memory_claim_gib": 0,
    "serve_on_demand": [],
    "serve_first_byte_timeout": 900,
}
# What each stage reads of the inventory (and the serve role's defaults), by name: lookup sparkplay_settings
# (playbooks/recipe.yml, the serve role's plan and vars) and the CLI read exactly these. A new setting is one entry here
# (with its default above) and one role default.
SETTINGS: dict[str, tuple[str, ...]] = {
    "stage_one": (*DEFAULTS, *API_SETTINGS, "serve_mode", "serve_node"),
    "launch": tuple(LAUNCH_DEFAULTS),
    "layout": tuple(LAYOUT_DEFAULTS),  # what a rank lays on its node (sparkplay.layout)
}


def node_constants(_: Any = None) -> dict[str, Any]:
    """What a node holds whatever the deployment, for playbooks that run without one (reset, bench) and
    records older than their fields: the engine user, the serve tool, every unit (in stopping order), the
    unit folder and the default state folder."""
    return {
        "engine_user": ENGINE_USER,
        "bench_user": BENCH_USER,
        "added_user_prefix": ADDED_USER_PREFIX,
        "serve_tool": TOOLS["serve"],
        "units": list(UNITS.values()),
        "unit_dir": UNIT_DIR,
        "state_dir": str(LAUNCH_DEFAULTS["serve_state_dir"]),
        # where added deployments keep their records, env files (engines/names.py); the gateway's names
        "added_dir": ADDED_DIR,
        "gateway": gateway(),
        "holds": stack.HOLDS,  # the packages a lock held (reset releases them)
        "stack_lock": stack.FILE,  # the lock's file, in the inventory's folder (on the controller)
    }


# An on/off setting as Ansible reads one: `-e serve_watchdog_enabled=false` arrives as the string "false"
SWITCH_ON = frozenset({"true", "yes", "on", "y", "t", "1"})
SWITCH_OFF = frozenset({"false", "no", "off", "n", "f", "0"})


def switch(value: Any, name: str) -> bool:
    """An on/off setting (a bool, or a word Ansible's `bool` filter reads), as a bool; anything else refused."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word not in SWITCH_ON | SWITCH_OFF:
        raise BadInput(f"{name} is {value!r}, not on or off", f"set {name} to true or false")
    return word in SWITCH_ON


# what a first byte may take at most: a day (a bound past that is no bound)
FIRST_BYTE_MAX_S = 86400


def first_byte_bound(value: Any) -> int:
    """serve_first_byte_timeout as whole seconds, 1 to a day: the gateway's wait for a deployment's first byte."""
    try:
        seconds = int(str(value))
    except ValueError:
        seconds = 0
    if not 1 <= seconds <= FIRST_BYTE_MAX_S:
        raise BadInput(
            f"serve_first_byte_timeout is {value!r}, not whole seconds from 1 to {FIRST_BYTE_MAX_S}",
            "set it to the seconds a request's first byte may take (900 fits a long prefill on a big model)",
        )
    return seconds
