"""Filters that reach sparkplay's rank rules (the logic lives in the package, not in Jinja)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.sparkplay.spark.plugins.plugin_utils.sparkplay_package import resolve

FILTERS = {
    "sparkplay_rank_layout_problems": "sparkplay.deployment:hosts_layout_problems",
    "sparkplay_leader_host": "sparkplay.deployment:leader_host",
    "sparkplay_node_count_problem": "sparkplay.topology:node_count_problem",
}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return resolve(FILTERS)
