"""Filters for the engine and serve roles; the rules live in sparkplay.engines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkplay.deployment import LAUNCH_DEFAULTS, TOOLS, public
from sparkplay.engines.plan import ENGINE_USER, UNIT_DIR, UNITS
from sparkplay.engines.systemd import env_file, exec_line, plan_digest, plan_problems, status_rows, status_table
from sparkplay.hostfacts import prefix_cache_problems


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sparkplay_systemd_exec": exec_line,
            "sparkplay_env_file": env_file,
            "sparkplay_serve_status_rows": status_rows,
            "sparkplay_serve_status_table": status_table,
            "sparkplay_serve_plan_digest": plan_digest,
            "sparkplay_serve_plan_problems": plan_problems,
            "sparkplay_prefix_cache_problems": prefix_cache_problems,
            "sparkplay_engine_user": engine_user,
            "sparkplay_serve_tool": serve_tool,
            "sparkplay_deployment_public": public,
            "sparkplay_unit_names": unit_names,
            "sparkplay_state_dir": state_dir,
            "sparkplay_unit_dir": unit_dir,
        }


def engine_user(_: Any = None) -> str:
    """The system user native engines run as (sparkplay.engines.plan), for playbooks without a plan (reset)."""
    return ENGINE_USER


def serve_tool(_: Any = None) -> str:
    """Where the serve tool lives on a node (sparkplay.deployment), for a record older than its `tool` field."""
    return TOOLS["serve"]


def unit_names(_: Any = None) -> list[str]:
    """Every unit sparkplay writes on a node, in the order they stop (sparkplay.deployment), for playbooks
    that run without a deployment (reset)."""
    return list(UNITS.values())


def state_dir(_: Any = None) -> str:
    """The default state folder (sparkplay.deployment), for a record older than its `state_dir` field."""
    return str(LAUNCH_DEFAULTS["serve_state_dir"])


def unit_dir(_: Any = None) -> str:
    """Where sparkplay writes its units (sparkplay.engines.plan), for playbooks without a deployment (reset)."""
    return UNIT_DIR
