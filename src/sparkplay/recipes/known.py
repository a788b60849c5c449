"""What sparkplay knows about engines and models that recipes leave unsaid.

A recipe found on the web rarely says everything a deployment needs: the
Atlas recipe names no checkpoint repository, no pinned revision and no image
repository. These tables fill such gaps from sourced facts
(docs/recipes.md lists them, with sources), and every value they supply is
marked `filled` in the recipe's provenance. A value the recipe states always
wins over the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkplay import imageref


@dataclass(frozen=True)
class EngineDefaults:
    runtime: str
    port: int
    health_timeout_s: int
    image_repository: str | None = None
    packages: tuple[str, ...] = ()
    # knobs the engine's launcher exposes, at their defaults
    knobs: dict[str, Any] = field(default_factory=dict)
    # settings a recipe's prose names that are really a knob's doing: they
    # leave serve.env and the knob governs them (docs/serving.md, Atlas knobs)
    knob_env: dict[str, str] = field(default_factory=dict)


# Atlas's image families, by image repository: each starts its ranks its own way (engines/atlas.py,
# engines/atlas_gb10.py); the SparkGLM images alone read the knobs below through their profile
ATLAS_FAMILIES = {"sparkglm": ("ghcr.io/enntity/atlas-sparkglm",), "gb10": ("avarok/atlas-gb10",)}


def atlas_family(image: str | None) -> str | None:
    """The Atlas image family of an image reference (None: none sparkplay knows)."""
    found = imageref.repository(image or "")
    return next((name for name, repositories in ATLAS_FAMILIES.items() if found in repositories), None)


ENGINES: dict[str, EngineDefaults] = {
    # SparkGLM's start scripts: API on 8893, up to 15 min to healthy.
    "atlas": EngineDefaults(
        runtime="docker",
        port=8893,
        health_timeout_s=900,
        image_repository="ghcr.io/enntity/atlas-sparkglm",
        knobs={
            "kv_shard": False,
            "display_carveout": False,
            "fabric_siblings": True,
            "prefix_cache_dir": None,
            "prefix_cache_gb": None,
        },
        knob_env={
            "FABRIC_SIBLINGS": "fabric_siblings",
            "DISPLAY_CARVEOUT": "display_carveout",
            "ATLAS_GLM_KV_SHARD": "kv_shard",
            "ATLAS_GLM_KV_SHARD_COMPACT": "kv_shard",
            **dict.fromkeys(
                (
                    "ATLAS_KV_NVME_DIR",
                    "ATLAS_KV_NVME_GB",
                    "ATLAS_GLM_NVME_FAST",
                    "ATLAS_SSM_TIER",
                    "ATLAS_SSM_TIER_UNIFIED",
                    "ATLAS_SSM_TIER_SWAP_DIR",
                    "ATLAS_SSM_TIER_DISK_GB",
                    "ATLAS_SSM_TIER_SLOTS",
                ),
                "prefix_cache_dir",
            ),
        },
    ),
    # SGLang's launch_server default port; a first boot compiles CUDA graphs
    "sglang": EngineDefaults(runtime="docker", port=30000, health_timeout_s=1800),
    # vLLM's OpenAI server default port; first boots can autotune for an hour,
    # recipes raise this through VLLM_ENGINE_READY_TIMEOUT_S.
    "vllm": EngineDefaults(runtime="docker", port=8000, health_timeout_s=1800),
    # Debian forky's llama.cpp packages; llama-server's default port there.
    "llamacpp": EngineDefaults(
        runtime="native",
        port=9931,
        health_timeout_s=120,
        packages=("llama.cpp-tools", "llama.cpp-tools-extra", "libggml0-backend-rpc"),
    ),
}


@dataclass(frozen=True)
class KnownModel:
    """A model sparkplay has facts for, recognised by engine plus one identifying flag."""

    label: str
    engine: str
    match_flag: str
    match_value: str
    fills: dict[str, Any] = field(default_factory=dict)


MODELS: tuple[KnownModel, ...] = (
    KnownModel(
        label="GLM-5.3-Flash NVFP4 on Atlas (SparkGLM RC4.x)",
        engine="atlas",
        match_flag="--kernel-target",
        match_value="glm-5.3-flash",
        fills={
            "model.repo": "nvidia/GLM-5.3-Flash-NVFP4",
            "model.revision": "423acf37583782c51c142d145aef733d72943d93",
            "model.quant": "nvfp4",
            "model.served_name": "glm-5.3-flash-atlas",
            "model.checkpoints": [
                {
                    "role": "target",
                    "repo": "nvidia/GLM-5.3-Flash-NVFP4",
                    "revision": "423acf37583782c51c142d145aef733d72943d93",
                    "size_bytes": 204476277515,
                    "mount": None,
                    "license": None,
                },
                {
                    "role": "drafter",
                    "repo": "incoai/GLM-5.3-Flash-DFlash2",
                    "revision": "7d74cdd881ed7e32c31175984a67823127b66cfe",
                    "size_bytes": 2000000000,
                    "mount": "/models/drafter",
                    "license": "CC BY-NC-ND 4.0: non-commercial use only",
                },
            ],
            # the engine refuses to start without all 864 MTP experts as NVFP4
            "model.overlay": {"kind": "nvfp4-mtp", "expect": 864, "mount": "/models/atlas-overlay"},
            "requirements.gpu_arch": "sm_121",
            "requirements.driver_min": "580",
            # 204 GB target + 2 GB drafter + 16 GB overlay, plus headroom
            "requirements.disk_per_node_gb": 223,
            "requirements.memory_gb": 119,
        },
    ),
    KnownModel(
        label="GLM-5.3-Flash NVFP4-A16 on vLLM (LibertAIDAI quant)",
        engine="vllm",
        match_flag="model",
        match_value="LibertAIDAI/GLM-5.3-Flash-NVFP4",
        fills={
            "model.quant": "nvfp4",
            "requirements.gpu_arch": "sm_121",
            "requirements.disk_per_node_gb": 155,
            "requirements.memory_gb": 119,
        },
    ),
)


def find_model(engine: str, model: str | None, flags: dict[str, str | None]) -> KnownModel | None:
    for known in MODELS:
        if known.engine != engine:
            continue
        value = model if known.match_flag == "model" else flags.get(known.match_flag)
        if value is not None and value.lower() == known.match_value.lower():
            return known
    return None
