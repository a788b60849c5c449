"""Rules about ranks: one place, used by the CLI and (through a filter plugin) by Ansible."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkplay.errors import BadInput

# who leads: the host with this rank (rank 0 runs the API, the others are workers)
LEADER_RANK = 0


def leads(rank: int) -> bool:
    """Whether the host of this rank is the leader: the one rule, read by the Deployment and the engines."""
    return rank == LEADER_RANK


def rank_layout_problems(ranks: Mapping[str, Any]) -> list[str]:
    """Why a host -> sparkplay_rank mapping is not a valid layout (empty if it is).

    Valid: every host has an integer rank, exactly one host is rank 0 (the
    leader), ranks are unique and contiguous from 0.
    """
    problems: list[str] = []
    if not ranks:
        return ["the group sparkplay_nodes has no hosts; list your nodes in the inventory"]
    good: dict[str, int] = {}
    for host, rank in sorted(ranks.items()):
        # bool is an int in Python; "1" from a careless -e is a string: both are mistakes
        if rank is None:
            problems.append(f"{host}: sparkplay_rank is not set; give every node a rank (leader 0)")
        elif isinstance(rank, bool) or not isinstance(rank, int):
            problems.append(f"{host}: sparkplay_rank must be a whole number, got {rank!r}")
        elif rank < 0:
            problems.append(f"{host}: sparkplay_rank must be 0 or more, got {rank}")
        else:
            good[host] = rank
    leaders = sorted(host for host, rank in good.items() if leads(rank))
    if not leaders:
        problems.append("no host has sparkplay_rank 0; give the leader rank 0")
    elif len(leaders) > 1:
        problems.append(f"more than one rank 0 ({', '.join(leaders)}); exactly one host leads")
    by_rank: dict[int, list[str]] = {}
    for host, rank in good.items():
        by_rank.setdefault(rank, []).append(host)
    for rank, hosts in sorted(by_rank.items()):
        if rank != 0 and len(hosts) > 1:
            problems.append(f"rank {rank} is used by {', '.join(sorted(hosts))}; ranks must be unique")
    if not problems:
        missing = sorted(set(range(len(ranks))) - set(good.values()))
        if missing:
            problems.append(
                f"ranks must be contiguous from 0 to {len(ranks) - 1}; missing {', '.join(map(str, missing))}"
            )
    return problems


def node_count_problem(
    recipe: Mapping[str, Any] | None, count: int, group: str = "sparkplay_nodes", mode: str = "replace"
) -> str | None:
    """Why the recipe cannot run on `count` nodes, or None: a recipe written for N nodes runs on exactly N
    (one GPU per Spark); one added beside what is served (`mode` add) runs on one node of them, or, written
    for N, on the first N (the leader first). The one node-count rule; the message names the fix."""
    wanted = ((recipe or {}).get("topology") or {}).get("nodes")
    if mode == "add":
        if wanted is None or wanted <= count:
            return None
        return (
            f"recipe {recipe.get('name') if recipe else None} runs on {wanted} nodes but the inventory has {count} "
            f"in {group}: list {wanted} hosts in {group}, or add a recipe written for fewer"
        )
    if wanted is None or wanted == count:
        return None
    return (
        f"recipe {recipe.get('name') if recipe else None} runs on {wanted} node(s) but the inventory has {count} "
        f"in {group}: list {wanted} hosts in {group}, or choose a recipe written for {count}"
    )


def check_node_count(
    recipe: Mapping[str, Any] | None, count: int, group: str = "sparkplay_nodes", mode: str = "replace"
) -> None:
    """node_count_problem as an error, before anything runs."""
    problem = node_count_problem(recipe, count, group, mode)
    if problem:
        what, fix = problem.split(": ", 1)
        raise BadInput(what, fix)
