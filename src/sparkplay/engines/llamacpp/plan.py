"""llama.cpp across ranks over its RPC backend (the lab's engine; runs on CPU).

Workers run `ggml-rpc-server` bound to their cable address; the leader runs
`llama-server` with `--rpc` listing every worker, which places layers on
them. A leader started while a worker is down exits, and after a worker
restarts the leader's connection to it is dead: so the leader waits for the
workers' ports before it starts, and a watcher restarts it when a worker
goes away (leader_follows_workers). Facts: docs/serving.md,
lab-testbed.md.
"""

from __future__ import annotations

from typing import Any

from sparkplay import argv
from sparkplay.engines.context import Context, engine_args, with_served_name
from sparkplay.errors import BadInput

RPC_PORT = 50052
SERVER = "/usr/bin/llama-server"
# stated by the recipe's own fields (model.path, serve.bind/port): set once, effective values
# (-hf and --hf-file: the import resolved them into model.path and the projector, served from the mirror)
REPLACED = (
    "-m",
    "--model",
    "--host",
    "--port",
    "-hf",
    "-hfr",
    "--hf-repo",
    "-hff",
    "--hf-file",
    "-hfd",
    "-hfrd",
    "--hf-repo-draft",
    "--spec-draft-hf",
)
# only sparkplay knows the workers
OWNED = ("--rpc",)

# flags the plan adds to the leader when the recipe has not: why, as the import says it
ADDED = {
    "--metrics": "llama-server's Prometheus /metrics (off unless asked for), which sparkplay's metrics and "
    "watchdog read"
}


def rpc_server(machine: str) -> str:
    """Debian ships the RPC server outside PATH, under the multiarch triplet."""
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)
    return f"/usr/libexec/{arch}-linux-gnu/llama/bin/ggml-rpc-server"


def plan(ctx: Context) -> dict[str, Any]:
    recipe = ctx.recipe
    args = with_served_name(engine_args(recipe, REPLACED, OWNED, "llamacpp"), recipe, "--alias", "-a")
    path = recipe["model"].get("path")
    if not path:
        raise BadInput("the llamacpp recipe names no model file", "set model.path (a GGUF file under the model root)")
    model = ctx.in_model_root(path, "model.path")
    env = dict(recipe["serve"]["env"])
    workers = ctx.nodes[1:]
    rpc = ctx.rendezvous(RPC_PORT)
    endpoints = [f"{node.address}:{rpc}" for node in workers]
    ranks: list[dict[str, Any]] = [
        {
            "rank": node.rank,
            "host": node.host,
            "role": "worker",
            # bound to the cable address only: the RPC protocol has no authentication
            "argv": [rpc_server(node.machine), "-H", node.address, "-p", str(rpc)],
            "env": env,
            "listen": [{"address": node.address, "port": rpc}],
            # bound to the cable already; guarded too (an address can be reached over another interface)
            "peer_ports": [rpc],
            "wait_for": [],
        }
        for node in workers
    ]
    leader_argv = [SERVER, "-m", model, *args]
    gguf = recipe["model"].get("gguf") or {}
    if gguf.get("projector"):  # what -hf would have loaded beside the model
        leader_argv += ["--mmproj", ctx.in_model_root(gguf["projector"], "model.gguf.projector")]
    if gguf.get("draft"):  # -hfd's draft, from the mirror
        leader_argv += ["-md", ctx.in_model_root(gguf["draft"], "model.gguf.draft")]
    if endpoints:
        leader_argv += ["--rpc", ",".join(endpoints)]
    leader_argv += ["--host", ctx.bind, "--port", str(ctx.port)]
    leader_argv += [flag for flag in ADDED if not argv.has_flag(args, flag)]
    leader = {
        "rank": 0,
        "host": ctx.leader.host,
        "role": "leader",
        "argv": leader_argv,
        "env": env,
        "listen": [{"address": ctx.bind, "port": ctx.port}],
        "peer_ports": [],
        "wait_for": endpoints,
    }
    for rank_plan in (leader, *ranks):
        rank_plan.update({"mounts": [], "container_options": [], "files": []})
    return {
        "ranks": [leader, *ranks],
        "leader_follows_workers": bool(endpoints),
        "requires": [{"host": ctx.leader.host, "path": model, "what": "the GGUF model file"}],
    }
