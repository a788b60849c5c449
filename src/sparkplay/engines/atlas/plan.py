"""Atlas: the image family decides the launch convention; the SparkGLM RC4.x stack is planned here.

Two families are known, told apart by the image's repository: SparkGLM's
(below) and the public avarok/atlas-gb10 images (`engines/atlas/gb10.py`:
rank flags, `spark serve`). An Atlas image of neither family is refused by
name: their conventions differ, and a guess would start the wrong one.

SparkGLM: one container per rank, rank 1 first.

The image's entrypoint drops every ambient ATLAS_* variable and applies a
named profile, so the recipe's ATLAS_* settings reach the engine through a
custom profile file mounted at /opt/atlas/profiles/custom.json; everything
else (rank, master, fabric, paths) is plain container environment. Knobs
(memory utilisation, KV shard, display carve-out, fabric siblings, the disk
prefix cache) are validated here. Facts: docs/serving.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sparkplay import boundary, checkpoints
from sparkplay.engines import names
from sparkplay.engines.atlas import gb10 as atlas_gb10
from sparkplay.engines.atlas.spec import FAMILIES, family_of
from sparkplay.engines.context import GPU_RDMA_CONFINED, HOST_NETWORK_IPC, Context, engine_args, fabric_env, served_name
from sparkplay.errors import BadInput


def family(recipe: Any) -> str:
    """The Atlas image family of a recipe: the one its import recognised from its command (engine.family), else
    (a recipe from before that field) its image's repository; another image is refused by name."""
    image = str(recipe["engine"].get("image") or "")
    found = family_of(image)
    stated = recipe["engine"].get("family")
    if stated and found not in (None, stated):
        raise BadInput(
            f"engine.image {image!r} is an Atlas {found} image, but the recipe's command is the {stated} "
            "family's (engine.family)",
            "make the image and the command agree",
        )
    if stated:
        return str(stated)
    if found:
        return found
    known = ", ".join(r for repositories in FAMILIES.values() for r in repositories)
    raise BadInput(
        f"engine.image {image!r} is no Atlas image family sparkplay knows ({known}): each starts its "
        "ranks its own way, and sparkplay does not guess",
        "--set engine.image to an image of one of them",
    )


MASTER_PORT = 29510
PROFILE_SCHEMA = "sparkglm.atlas-install-profile/v1"
PROFILE_IN_CONTAINER = "/opt/atlas/profiles/custom.json"
CUDA_CACHE = "/atlas-cuda-cache"
PREFIX_CACHE = "/prefix-cache"
# stated by the recipe's own fields (serve.bind/port) and per rank: sparkplay sets them, once
REPLACED = ("--host", "--port")
PREFIX_GB_RANGE = (16, 100)
CONTAINER_OPTIONS = [
    *HOST_NETWORK_IPC,
    "--memory",
    "114g",
    *GPU_RDMA_CONFINED,
    "--cap-add",
    "SYS_NICE",
    "--ulimit",
    "memlock=-1:-1",
    "--stop-timeout",
    "60",
]


def check_knobs(knobs: dict[str, Any], ours: Sequence[str] = ()) -> None:
    # the engines' own range, a fraction of the GPU's memory (vLLM: above 0, at most 1); small models on a
    # shared node use small fractions, so sparkplay narrows it no further
    memory = knobs.get("gpu_memory_utilization")
    if memory is not None and not 0 < float(memory) <= 1:
        raise BadInput(
            f"gpu_memory_utilization {memory} is not a fraction of the GPU's memory", "choose above 0, up to 1"
        )
    for flag in ("kv_shard", "display_carveout", "fabric_siblings"):
        if knobs.get(flag) not in (None, True, False, 0, 1):
            raise BadInput(f"knob {flag} must be true or false, got {knobs[flag]!r}", f"set {flag} to true or false")
    directory, size = knobs.get("prefix_cache_dir"), knobs.get("prefix_cache_gb")
    if directory is None:
        return
    boundary.check_host_folder(directory, "prefix_cache_dir", ours)
    low_gb, high_gb = PREFIX_GB_RANGE
    if size is None or not low_gb <= int(size) <= high_gb:
        raise BadInput(
            f"prefix_cache_gb {size!r} is outside {low_gb}-{high_gb} GiB per node", f"choose {low_gb} to {high_gb}"
        )


def profile_env(recipe_env: dict[str, str], knobs: dict[str, Any]) -> dict[str, str]:
    """The ATLAS_* settings the engine will actually apply (the profile's environment)."""
    env = {k: v for k, v in recipe_env.items() if k.startswith("ATLAS_")}
    if knobs.get("kv_shard"):
        env |= {"ATLAS_GLM_KV_SHARD": "1", "ATLAS_GLM_KV_SHARD_COMPACT": "1"}
    if knobs.get("prefix_cache_dir"):
        half = str(int(knobs["prefix_cache_gb"]) // 2)
        env |= {
            "ATLAS_KV_NVME_DIR": f"{PREFIX_CACHE}/kv",
            "ATLAS_KV_NVME_GB": half,
            "ATLAS_GLM_NVME_FAST": "1",
            "ATLAS_SSM_TIER": "1",
            "ATLAS_SSM_TIER_UNIFIED": "1",
            "ATLAS_SSM_TIER_SWAP_DIR": f"{PREFIX_CACHE}/ssm",
            "ATLAS_SSM_TIER_DISK_GB": half,
            "ATLAS_SSM_TIER_SLOTS": "2",
        }
    return env


def plan(ctx: Context) -> dict[str, Any]:
    if family(ctx.recipe) == "gb10":
        return atlas_gb10.plan(ctx)
    recipe, knobs = ctx.recipe, ctx.knobs
    state = ctx.options.state_dir.rstrip("/")
    cuda_cache = names.slotted(f"{state}/atlas-cuda-cache", ctx.options.slot)  # its compiled kernels, its own
    check_knobs(knobs, [ctx.model_root, state])
    args = engine_args(recipe, REPLACED, (), "atlas")
    model = recipe["model"]
    target = ctx.checkpoint_dir("target")
    drafter = ctx.checkpoint_dir("drafter")
    overlay = model.get("overlay")
    if target is None:
        raise BadInput("the atlas recipe has no target checkpoint", "set model.checkpoints (role: target)")
    # the NVFP4 MTP overlay is what GLM's checkpoint lacks; other models are served from the checkpoint itself
    overlay_dir = checkpoints.overlay_dir(ctx.model_root, overlay["mount"]) if overlay else None
    model_in_container = overlay["mount"] if overlay else target
    profile_path = "/etc/sparkplay/atlas-profile.json"
    profile = {
        "schema": PROFILE_SCHEMA,
        "environment": profile_env(dict(recipe["serve"]["env"]), knobs),
        "server_argv": args,
    }
    # same absolute paths as on the host (the overlay's links point there), plus the
    # container paths the recipe's own flags name
    mounts = [
        {"source": target, "target": target, "readonly": True},
        *(
            [
                {"source": overlay_dir, "target": overlay_dir, "readonly": True},
                {"source": overlay_dir, "target": overlay["mount"], "readonly": True},
            ]
            if overlay and overlay_dir
            else []
        ),
        {"source": cuda_cache, "target": CUDA_CACHE, "readonly": False},
        {"source": profile_path, "target": PROFILE_IN_CONTAINER, "readonly": True},
    ]
    drafter_mount = next((c.get("mount") for c in model.get("checkpoints") or [] if c["role"] == "drafter"), None)
    if drafter:
        mounts.insert(1, {"source": drafter, "target": drafter, "readonly": True})
        if drafter_mount:
            mounts.insert(2, {"source": drafter, "target": drafter_mount, "readonly": True})
    directories = [cuda_cache]
    if knobs.get("prefix_cache_dir"):
        directory = boundary.check_host_folder(knobs["prefix_cache_dir"], "prefix_cache_dir", [])
        mounts.append({"source": directory, "target": PREFIX_CACHE, "readonly": False})
        directories += [directory, f"{directory}/kv", f"{directory}/ssm"]
    options = list(CONTAINER_OPTIONS)
    if knobs.get("display_carveout"):
        options += ["--cap-add", "SYS_ADMIN"]  # the server drops it after exporting the carve-out
    ranks = []
    for node in ctx.nodes:
        env = {
            **fabric_env(dict(node.fabric_env)),
            **{k: v for k, v in recipe["serve"]["env"].items() if not k.startswith("ATLAS_")},
            "NODE_RANK": str(node.rank),
            "MASTER_ADDR": ctx.leader.address,
            "MASTER_PORT": str(ctx.rendezvous(MASTER_PORT)),
            "MODEL_PATH": model_in_container,
            "SERVED_MODEL_NAME": served_name(recipe),
            "NCCL_SOCKET_IFNAME": node.nccl_ifnames,
            "GLOO_SOCKET_IFNAME": node.ifname,
            "HF_HUB_OFFLINE": "1",
            "SPARKGLM_PROFILE": "custom",
            "SPARKGLM_GPU_MEMORY_UTILIZATION": str(knobs.get("gpu_memory_utilization") or 0.88),
            "KV_SHARD": "1" if knobs.get("kv_shard") else "0",
            "DISPLAY_CARVEOUT": "1" if knobs.get("display_carveout") else "0",
            "FABRIC_SIBLINGS": "1" if knobs.get("fabric_siblings") else "0",
        }
        if drafter_mount:
            env["DRAFTER_PATH"] = drafter_mount
        ranks.append(
            {
                "rank": node.rank,
                "host": node.host,
                "role": "leader" if node.leads else "worker",
                # the seed's own command: `serve MODEL FLAGS...`, MODEL being the overlay's container path
                # rank r's API on port + r, where the plan says it listens (the recipe's --host/--port dropped)
                "argv": [
                    "serve",
                    model.get("path") or model_in_container,
                    *args,
                    "--host",
                    ctx.bind,
                    "--port",
                    str(ctx.port + node.rank),
                ],
                "env": env,
                "mounts": mounts,
                "container_options": options,
                "files": [{"path": profile_path, "content": json.dumps(profile, indent=2) + "\n", "mode": "0644"}],
                # rank r serves its API on port + r; only the leader's is the deployment's
                "listen": [{"address": ctx.bind, "port": ctx.port + node.rank}],
                # rank 0's TCPStore listens on every address: the peer firewall guards it
                "peer_ports": [ctx.rendezvous(MASTER_PORT)] if node.leads else [],
                "wait_for": [],
            }
        )
    requires = [
        {"host": n.host, "path": f"{overlay_dir}/sparkplay-overlay.json", "what": "the verified overlay"}
        if overlay_dir
        else {"host": n.host, "path": target, "what": "the target checkpoint"}
        for n in ctx.nodes
    ]
    return {"ranks": ranks, "leader_follows_workers": False, "directories": directories, "requires": requires}
