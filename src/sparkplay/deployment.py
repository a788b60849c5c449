"""The deployment: who leads, every path on a node, every checkpoint and the overlay, computed once.

Computed on the controller from the recipe (or none), the inventory's ranks
and its settings, before any node is touched: playbooks/recipe.yml hands it
to Ansible through the `sparkplay_deployment` lookup, the roles read it
(`sparkplay_deployment`), and `sparkplay plan --json` prints it. The per-rank
launch plans (argv, env, mounts) are the engine adapters' (engines/plan.py):
they need each rank's cable facts, which exist once provisioning ran.

Paths are normalised here once (trailing slashes, '..' refused), so a
checkpoint folder, the overlay folder and the files the units read are the
same strings wherever they are used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sparkplay import __version__, checkpoints, topology
from sparkplay.engines.context import api_address
from sparkplay.engines.plan import ENV_FILE, UNIT
from sparkplay.errors import BadInput

GROUP = "sparkplay_nodes"

# The settings an inventory may change, with their defaults. roles/sparkplay/defaults/main.yml
# states the same values for Ansible; tests/test_deployment.py keeps the two equal.
DEFAULTS: dict[str, Any] = {
    "sparkplay_model_root": "/var/lib/sparkplay/models",
    "sparkplay_fabric_env_file": "/etc/sparkplay/fabric.env",
    "sparkplay_serve_record": "/etc/sparkplay/serve.json",
    "sparkplay_docker": "/usr/bin/docker",
}
# The inventory's API address (the serve role's serve_bind / serve_port): empty or 0 keeps the recipe's.
API_SETTINGS = ("serve_bind", "serve_port")
TOOLS = {"checkpoint": "/usr/local/lib/sparkplay/sparkplay-ckpt", "serve": "/usr/local/lib/sparkplay/sparkplay-serve"}
OVERLAY_EXPECT = 864  # MTP expert matrices of GLM-5.x (layer 45: 288 experts x gate/up/down)


def leader_of(ranks: Mapping[str, Any]) -> str:
    """The host with rank 0, once the layout is valid (the one rule for who leads)."""
    problems = topology.rank_layout_problems(ranks)
    if problems:
        fix = "give each node a distinct sparkplay_rank from 0"
        raise BadInput(f"inventory rank layout: {'; '.join(problems)}", fix)
    return next(host for host, rank in ranks.items() if rank == 0)


def _api(recipe: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any] | None:
    if not recipe.get("serve"):
        return None
    bind, port = api_address(recipe["serve"], settings.get("serve_bind"), settings.get("serve_port"))
    return {"bind": bind, "port": port}


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
    topology.check_node_count(recipe, len(ranks), GROUP)
    nodes = [{"host": host, "rank": int(rank), "role": "leader" if rank == 0 else "worker"}
             for host, rank in sorted(ranks.items(), key=lambda item: item[1])]  # fmt: skip
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
        "leader": leader,
        "nodes": nodes,
        "paths": {
            "model_root": root,
            "fabric_env": checkpoints.absolute(merged["sparkplay_fabric_env_file"], "sparkplay_fabric_env_file"),
            "serve_record": checkpoints.absolute(merged["sparkplay_serve_record"], "sparkplay_serve_record"),
            "serve_env": ENV_FILE,
            "serve_unit": f"/etc/systemd/system/{UNIT}.service",
            "tools": dict(TOOLS),
        },
        "checkpoints": checkpoints.sources(recipe, root, staged, lock),
        "model": {"dir": checkpoints.model_dir(root, model), "repo": model.get("repo")} if model else None,
        "overlay": overlay,
        "engine": {
            "name": engine.get("name"),
            "runtime": engine.get("runtime"),
            "image": engine.get("image") if engine.get("runtime") == "docker" else None,
            "docker": checkpoints.absolute(merged["sparkplay_docker"], "sparkplay_docker"),
        }
        if engine
        else None,
        "api": _api(recipe, merged),
    }
