"""Filters that reach sparkplay's rank rules (the logic lives in the package, not in Jinja)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sparkplay.deployment import leader_of
from sparkplay.errors import BadInput
from sparkplay.topology import node_count_problem, rank_layout_problems


def _layout_problems(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> list[str]:
    """`groups['sparkplay_nodes'] | sparkplay_rank_layout_problems(hostvars)`."""
    return rank_layout_problems({host: hostvars[host].get("sparkplay_rank") for host in hosts})


def _leader_host(hosts: Iterable[str], hostvars: Mapping[str, Any]) -> str | None:
    """`groups['sparkplay_nodes'] | sparkplay_leader_host(hostvars)`: rank 0's host (the leader rule), whose
    view of the inventory's settings a run takes; with a broken layout the first host, for the deployment's
    own check to name what is wrong."""
    hosts = list(hosts)
    try:
        return leader_of({host: hostvars[host].get("sparkplay_rank") for host in hosts})
    except BadInput:
        return hosts[0] if hosts else None


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sparkplay_rank_layout_problems": _layout_problems,
            "sparkplay_leader_host": _leader_host,
            "sparkplay_node_count_problem": node_count_problem,
        }
