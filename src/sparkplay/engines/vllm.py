"""vLLM across ranks without Ray (distributed backend `mp`).

Every rank runs the same `vllm serve <model>` with --nnodes/--node-rank/
--master-addr/--master-port; ranks above 0 add --headless (no API). The
recipe's flags and environment pass through verbatim. Facts:
docs/serving.md.
"""

from __future__ import annotations

from typing import Any

from sparkplay.engines.context import Context, engine_args, fabric_env
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline

MASTER_PORT = 29501
REPLACED = ("--host", "--port")
OWNED = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")


def plan(ctx: Context) -> dict[str, Any]:
    recipe = ctx.recipe
    args = engine_args(recipe["serve"]["args"], REPLACED, OWNED, "vllm")
    model = ctx.checkpoint_dir("target")
    if model is None:
        raise BadInput("the vllm recipe has no target checkpoint", "set model.checkpoints (role: target)")
    state = ctx.options.state_dir.rstrip("/")
    mounts = [
        {"source": ctx.model_root, "target": ctx.model_root, "readonly": True},
        # autotuned kernels persist here: the hour-long first boot is paid once
        {"source": f"{state}/cache/vllm", "target": "/root/.cache/vllm", "readonly": False},
    ]
    options = [
        "--network", "host", "--ipc", "host", "--gpus", "all",
        "--shm-size", recipe["serve"].get("shm_size") or "32g",
        "--ulimit", "memlock=-1", "--device", "/dev/infiniband", "--cap-add", "IPC_LOCK",
        "--stop-timeout", "60", "--entrypoint", "vllm",
    ]  # fmt: skip
    topology = recipe["topology"]
    extra_tp = [] if cmdline.has_flag(args, "--tensor-parallel-size", "-tp") else [
        "--tensor-parallel-size", str(topology["tensor_parallel"])
    ]  # fmt: skip
    nnodes = str(len(ctx.nodes))
    ranks = []
    for node in ctx.nodes:
        argv = ["serve", model, *args, *extra_tp, "--nnodes", nnodes, "--node-rank", str(node.rank),
                "--master-addr", ctx.leader.address, "--master-port", str(MASTER_PORT)]  # fmt: skip
        argv += ["--host", ctx.bind, "--port", str(ctx.port)] if node.rank == 0 else ["--headless"]
        env = {
            **fabric_env(dict(node.fabric_env)),
            **recipe["serve"]["env"],
            "VLLM_HOST_IP": node.address,
            "NCCL_SOCKET_IFNAME": node.ifname,
            "GLOO_SOCKET_IFNAME": node.ifname,
            "TP_SOCKET_IFNAME": node.ifname,
        }
        ranks.append(
            {
                "rank": node.rank,
                "host": node.host,
                "role": "leader" if node.rank == 0 else "worker",
                "argv": argv,
                "env": env,
                "mounts": mounts,
                "container_options": options,
                "files": [],
                "listen": [{"address": ctx.bind, "port": ctx.port}] if node.rank == 0 else [],
                # headless workers connect to the leader, not the other way round
                "wait_for": [],
            }
        )
    return {
        "ranks": ranks,
        "leader_follows_workers": False,
        "directories": [f"{state}/cache/vllm"],
        "requires": [{"host": n.host, "path": model, "what": "the target checkpoint"} for n in ctx.nodes],
    }
