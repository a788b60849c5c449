"""SGLang: one container per rank, `python3 -m sglang.launch_server`, its own multi-node start.

Every rank runs the same server line with `--nnodes N --node-rank r
--dist-init-addr LEADER:25000` (sparkrun's SGLang runtime's convention and
init port); rank 0 serves the OpenAI API, the others run their share of the
model only. One GPU per Spark: tensor x pipeline parallel must equal the
node count (data and expert parallel live inside those groups in SGLang).
The recipe's flags pass through; the model path, the API address and the
ranks are sparkplay's. Facts: docs/serving.md.
"""

from __future__ import annotations

from typing import Any

from sparkplay import argv, checkpoints
from sparkplay.engines import names
from sparkplay.engines.context import (
    Context,
    engine_args,
    fabric_env,
    gpu_container_options,
    parallel_size,
    with_served_name,
)
from sparkplay.errors import BadInput
from sparkplay.recipes.model_source import draft_source

INIT_PORT = 25000
# stated by the recipe's own fields (the model and its pinned revision, served from the mirror; serve.bind/port):
# set once, effective values
REPLACED = ("--model-path", "--model", "--revision", "--host", "--port")
# only sparkplay knows the ranks
OWNED = ("--nnodes", "--node-rank", "--dist-init-addr")
DRAFT_FLAGS = ("--speculative-draft-model-path", "--speculative-draft-model")
TP_FLAGS = ("--tp-size", "--tensor-parallel-size", "--tp")
PP_FLAGS = ("--pp-size", "--pipeline-parallel-size", "--pp")


def _mirrored_draft(args: list[str], ctx: Context) -> list[str]:
    """The draft model's flag pointed at its mirrored checkpoint, when it names one (hub id or cache path)."""
    value = argv.flag_value(args, *DRAFT_FLAGS)
    source = draft_source(value or "")
    mirrored = {c["repo"] for c in ctx.recipe["model"].get("checkpoints") or []}
    if source is None or source[0] not in mirrored:
        return args
    flag = next(f for f in DRAFT_FLAGS if argv.has_flag(args, f))
    return argv.with_flag(args, flag, checkpoints.checkpoint_dir(ctx.model_root, source[0]))


def plan(ctx: Context) -> dict[str, Any]:
    recipe = ctx.recipe
    args = with_served_name(engine_args(recipe, REPLACED, OWNED, "sglang"), recipe, "--served-model-name")
    args = _mirrored_draft(args, ctx)
    model = ctx.checkpoint_dir("target")
    if model is None:
        raise BadInput("the sglang recipe has no target checkpoint", "set model.checkpoints (role: target)")
    tp = parallel_size(args, recipe["topology"]["tensor_parallel"], *TP_FLAGS)
    pp = parallel_size(args, recipe["topology"]["pipeline_parallel"], *PP_FLAGS)
    count = len(ctx.nodes)
    if tp * pp != count:
        raise BadInput(
            f"SGLang's parallelism (tensor {tp} x pipeline {pp} = {tp * pp} GPUs) does not match the {count} "
            "node(s), one GPU each",
            "make tensor x pipeline parallel equal the node count (recipe flags or topology)",
        )
    memory = ctx.knobs.get("gpu_memory_utilization")
    if memory is not None:  # SGLang's name for the same fraction
        args = argv.with_flag(args, "--mem-fraction-static", str(memory))
    if tp > 1 and not argv.has_flag(args, *TP_FLAGS):  # 1 is SGLang's own default
        args += ["--tp-size", str(tp)]
    if pp > 1 and not argv.has_flag(args, *PP_FLAGS):
        args += ["--pp-size", str(pp)]
    state = ctx.options.state_dir.rstrip("/")
    cache = names.cache_dir(state, ctx.options.slot, "sglang")  # the deployment's own
    mounts = [
        {"source": ctx.model_root, "target": ctx.model_root, "readonly": True},
        {"source": cache, "target": "/root/.cache/sglang", "readonly": False},
    ]
    options = [*gpu_container_options(recipe["serve"].get("shm_size"), count == 1), "--entrypoint", "python3"]
    ranks = []
    init = ctx.rendezvous(INIT_PORT)
    for node in ctx.nodes:
        leader = node.leads
        cluster = (
            ["--nnodes", str(count), "--node-rank", str(node.rank), "--dist-init-addr", f"{ctx.leader.address}:{init}"]
            if count > 1
            else []
        )
        env = {
            **fabric_env(dict(node.fabric_env)),
            **recipe["serve"]["env"],
            "HF_HUB_OFFLINE": "1",
            "NCCL_SOCKET_IFNAME": node.nccl_ifnames,
            "GLOO_SOCKET_IFNAME": node.ifname,
            "NCCL_CUMEM_ENABLE": "0",  # sparkrun's SGLang cluster setting
        }
        ranks.append(
            {
                "rank": node.rank,
                "host": node.host,
                "role": "leader" if leader else "worker",
                "argv": [
                    "-m",
                    "sglang.launch_server",
                    "--model-path",
                    model,
                    *args,
                    "--host",
                    ctx.bind if leader else "127.0.0.1",
                    "--port",
                    str(ctx.port),
                    *cluster,
                ],
                "env": env,
                "mounts": mounts,
                "container_options": list(options),
                "files": [],
                "listen": [{"address": ctx.bind, "port": ctx.port}] if leader else [],
                # rank 0's torch distributed store answers on every address: the peer firewall guards it
                "peer_ports": [init] if leader and count > 1 else [],
                "wait_for": [],
            }
        )
    return {
        "ranks": ranks,
        "leader_follows_workers": False,
        # one torch distributed group: a worker of a dead leader never rejoins
        "workers_follow_leader": count > 1,
        "directories": [cache],
        "requires": [
            {
                "host": n.host,
                "path": checkpoints.checkpoint_dir(ctx.model_root, c["repo"]),
                "what": f"the {c['role']} checkpoint {c['repo']}",
            }
            for n in ctx.nodes
            for c in recipe["model"].get("checkpoints") or []
        ],
        "parallel": {"tensor": tp, "pipeline": pp, "data": 1, "backend": "sglang"},
    }
