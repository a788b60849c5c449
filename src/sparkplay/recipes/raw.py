"""What an importer read from a recipe source, before normalisation (sparkplay.recipes.normalise)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkplay import argv
from sparkplay.engines import registry


@dataclass
class RawRecipe:
    """What an importer read, before normalisation."""

    name: str
    title: str
    source: dict[str, Any]
    engine: str
    model: str | None
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    image_dir: str | None = None
    # the source runs the engine in a container whose image it does not name (one started elsewhere, one its
    # compose file builds): no default image stands in for that one
    image_unnamed: bool = False
    nodes: int | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    distributed_backend: str | None = None
    shm_size: str | None = None
    ulimits: list[str] = field(default_factory=list)  # the container's resource limits (docker --ulimit)
    container_user: str | None = None  # the user the container runs as (docker --user)
    port: int | None = None
    bind: str | None = None
    notes: str | None = None
    knobs: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # what the source states outright about the model, beyond the command line
    repo: str | None = None  # when the command names a file, not the repository
    revision: str | None = None
    quant: str | None = None
    health_timeout_s: int | None = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)  # other models: {repo, revision}
    bench: dict[str, Any] | None = None  # the recipe's own bench profile (pp, tg, depth, concurrency, runs)
    pinning: list[str] = field(default_factory=list)  # what the command ran the engine under (cmdline.Command)
    mods: list[dict[str, Any]] = field(default_factory=list)  # sparkrun's mods, read and pinned (recipes/mods.py)
    pre_exec: dict[str, Any] | None = None  # sparkrun's pre_exec commands, pinned (recipes/hooks.py)
    preamble: dict[str, Any] | None = None  # commands the command line runs before the engine, pinned likewise
    provenance: list[dict[str, str]] = field(default_factory=list)

    def note(self, key: str, how: str, detail: str) -> None:
        self.provenance.append({"key": key, "how": how, "detail": detail})

    def drop_per_rank(self) -> str | None:
        """One node's flags of a multi-node command (the engine spec's per_rank: ranks, the leader's address)
        are sparkplay's to set for each rank: dropped, said; returns the command's --nnodes, which counts."""
        owned = [f for f in registry.spec(self.engine).per_rank if argv.has_flag(self.args, f)]
        if not owned:
            return None
        count = argv.flag_value(self.args, "--nnodes")
        self.args = argv.without_flags(self.args, *owned)
        self.note(
            "serve.args",
            "cleaned",
            f"{', '.join(owned)}: one node's flags in a multi-node command; sparkplay "
            "sets each rank's own (the leader and the peers from the inventory)",
        )
        return count
