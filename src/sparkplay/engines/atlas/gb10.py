"""Atlas from the public avarok/atlas-gb10 images: `spark serve MODEL`, one container per rank.

The launch convention is sparkrun's Atlas runtime's (the integration the
image's recipes are written for): every rank runs the same `spark serve`
line with `--rank/--world-size/--master-addr/--master-port` (NCCL
bootstrap, no environment convention, no profile file), the image's own
entrypoint cleared; only rank 0 serves HTTP, the others bind `--port 0`.
The model is named by its hub id and read offline from a Hugging Face
cache: sparkplay mounts its mirrored checkpoint as that cache's snapshot
(and a ref naming it), so nothing is downloaded in the container.
World size: tp x ep, or tp when the two groups overlap (tp == ep).
"""

from __future__ import annotations

from typing import Any

from sparkplay import argv
from sparkplay.engines.context import (
    GPU_RDMA_CONFINED,
    HOST_NETWORK_IPC,
    Context,
    engine_args,
    fabric_env,
    hub_cache,
    with_served_name,
)
from sparkplay.errors import BadInput

MASTER_PORT = 29500  # sparkrun's init port for Atlas
HF_HOME = "/sparkplay-hf"  # the cache the container reads (HF_HOME; hf-hub and huggingface_hub read it alike)
REPLACED = ("--host", "--bind", "--port")  # Atlas's --host is an alias of --bind
# only sparkplay knows the ranks and where rank 0 is
OWNED = ("--rank", "--world-size", "--master-addr", "--master-port")
# the knobs only the SparkGLM images' profile reads
PROFILE_KNOBS = ("kv_shard", "display_carveout", "fabric_siblings", "prefix_cache_dir", "prefix_cache_gb")
CONTAINER_OPTIONS = [
    "--entrypoint",
    "spark",
    *HOST_NETWORK_IPC,
    *GPU_RDMA_CONFINED,
    "--ulimit",
    "memlock=-1:-1",
    "--stop-timeout",
    "60",
]


def world_size(args: list[str]) -> int:
    """Atlas's rule: tp x ep ranks, or tp when both groups live on the same ranks (tp == ep)."""
    tp = int(argv.flag_value(args, "--tp-size") or 1)
    ep = int(argv.flag_value(args, "--ep-size") or 1)
    return tp if tp == ep else tp * ep


def plan(ctx: Context) -> dict[str, Any]:
    recipe, knobs = ctx.recipe, ctx.knobs
    profile_only = [k for k in PROFILE_KNOBS if knobs.get(k)]
    if profile_only:
        raise BadInput(
            f"knob {profile_only[0]} is read by the SparkGLM Atlas images' profile, not by {recipe['engine']['image']}",
            f"remove {profile_only[0]} from the knobs",
        )
    args = with_served_name(engine_args(recipe, REPLACED, OWNED, "atlas"), recipe, "--model-name")
    if knobs.get("gpu_memory_utilization") is not None:
        args = argv.with_flag(args, "--gpu-memory-utilization", str(knobs["gpu_memory_utilization"]))
    model = recipe["model"]
    repo = model.get("repo")
    if not repo or ctx.checkpoint_dir("target") is None:
        raise BadInput("the atlas recipe names no hub repository to serve", "set model.repo (org/name)")
    world = world_size(args)
    if world != len(ctx.nodes):
        raise BadInput(
            f"Atlas's tp/ep sizes make a world of {world} rank(s) but there are {len(ctx.nodes)} nodes",
            "set --tp-size/--ep-size for the node count, or list that many nodes",
        )
    mounts: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for ckpt in model.get("checkpoints") or []:  # the target and any draft model, each a cache entry
        more, ref = hub_cache(ctx, ckpt["repo"], HF_HOME, "atlas-hf-ref")
        mounts += more
        files.append(ref)
    ranks = []
    for node in ctx.nodes:
        leader = node.leads
        api = ["--host", ctx.bind, "--port", str(ctx.port)] if leader else ["--port", "0"]
        cluster = (
            [
                "--rank",
                str(node.rank),
                "--world-size",
                str(world),
                "--master-addr",
                ctx.leader.address,
                "--master-port",
                str(ctx.rendezvous(MASTER_PORT)),
            ]
            if world > 1
            else []
        )
        env = {
            **fabric_env(dict(node.fabric_env)),
            **recipe["serve"]["env"],
            "HF_HOME": HF_HOME,
            "HF_HUB_OFFLINE": "1",
            "NCCL_SOCKET_IFNAME": node.nccl_ifnames,
            "GLOO_SOCKET_IFNAME": node.ifname,
        }
        ranks.append(
            {
                "rank": node.rank,
                "host": node.host,
                "role": "leader" if leader else "worker",
                "argv": ["serve", repo, *args, *api, *cluster],
                "env": env,
                "mounts": mounts,
                "container_options": list(CONTAINER_OPTIONS),
                "files": files,
                "listen": [{"address": ctx.bind, "port": ctx.port}] if leader else [],
                # rank 0's NCCL bootstrap store answers on every address: the peer firewall guards it
                "peer_ports": [ctx.rendezvous(MASTER_PORT)] if leader and world > 1 else [],
                "wait_for": [],
            }
        )
    requires = [
        {"host": n.host, "path": m["source"], "what": "a mirrored checkpoint"}
        for n in ctx.nodes
        for m in mounts
        if not m["source"].startswith("/etc/")
    ]
    return {"ranks": ranks, "leader_follows_workers": False, "directories": [], "requires": requires}
