"""Atlas as recipes say it: SparkGLM's `serve MODEL --kernel-target=...` or Atlas GB10's `spark serve MODEL`,
its two image families, its launcher's knobs, its drafters and the GLM checkpoint it is known to serve."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sparkplay import argv, imageref
from sparkplay.engines.spec import Defaults, EngineSpec, Fraction, KnownModel, Note, split_model
from sparkplay.errors import BadInput

IMAGE_REPOSITORY = "ghcr.io/enntity/atlas-sparkglm"
# its image families, by image repository: each starts its ranks its own way (engines/atlas/plan.py,
# engines/atlas/gb10.py); the SparkGLM images alone read the knobs below through their profile
FAMILIES = {"sparkglm": (IMAGE_REPOSITORY,), "gb10": ("avarok/atlas-gb10",)}


def family_of(image: str | None) -> str | None:
    """The Atlas image family of an image reference (None: none sparkplay knows)."""
    found = imageref.repository(image or "")
    return next((name for name, repositories in FAMILIES.items() if found in repositories), None)


# the GLM-5.3-Flash checkpoint its SparkGLM images serve (RC4.x): what the Atlas recipe leaves unsaid
GLM53 = KnownModel(
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
)


class Atlas(EngineSpec, name="atlas", title="Atlas", command="serve MODEL --kernel-target=..., or spark serve MODEL"):
    # SparkGLM's start scripts: API on 8893, up to 15 min to healthy
    defaults = Defaults(
        runtime="docker",
        port=8893,
        health_timeout_s=900,
        image_repository=IMAGE_REPOSITORY,
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
    )
    context_flags = ("--max-seq-len",)
    field_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "tensor_parallel": ("--tp-size",),
        "pipeline_parallel": ("--pp-size",),
        "expert_parallel": ("--ep-size",),
        "nodes": ("--world-size",),  # one GB10 per Spark: the world is the node count
        "gpu_memory_utilization": ("--gpu-memory-utilization",),
        "port": ("--port",),
        "bind": ("--host",),
        # SparkGLM's --served-model-name, the atlas-gb10 images' --model-name
        "served_name": ("--served-model-name", "--model-name"),
    }
    images = ("ghcr.io/enntity/*", "avarok/atlas-gb10")
    memory_fraction = Fraction(("--gpu-memory-utilization",), ("SPARKGLM_GPU_MEMORY_UTILIZATION",), 0.88)
    knobs_read = None  # every knob the schema names (its profile)
    served_name_flags = ("--model-name", "--served-model-name")
    program = ("serve",)  # with its --kernel-target, among the flags that said it is Atlas
    spellings = ("atlas",)
    own_flags = frozenset({"--kernel-target"})
    # its image entrypoint clears every ambient ATLAS_* and applies only its profile's
    # (shared/reference/engines.md), where the plan puts them
    plain_env_prefixes = ("ATLAS_",)
    models = (GLM53,)
    families = tuple(FAMILIES)

    def recognise(self, program: str, rest: Sequence[str]) -> tuple[str | None, list[str]] | None:
        if program == "serve" and any(t == "--kernel-target" or t.startswith("--kernel-target=") for t in rest):
            return split_model(rest)
        if program == "spark" and rest[:1] == ["serve"]:  # Atlas's own launcher, as sparkrun's atlas runtime calls it
            return split_model(rest[1:])
        return None

    def context_value(self, text: str) -> int | None:
        return argv.whole(text, "--max-seq-len")

    def speculative(self, args: Sequence[str], note: Note) -> dict[str, Any] | None:
        if argv.has_flag(args, "--dflash", "--draft-model"):
            return {
                "method": "dflash" if argv.has_flag(args, "--dflash") else "draft",
                "num_tokens": argv.whole(argv.flag_value(args, "--dflash-gamma"), "--dflash-gamma"),
                "draft_model": argv.flag_value(args, "--draft-model"),
            }
        # its own switches: the checkpoint's MTP head (--speculative), n-grams, or the model drafting itself
        for switch, method in (
            ("--speculative", "mtp"),
            ("--ngram-speculative", "ngram"),
            ("--self-speculative", "self"),
        ):
            if argv.has_flag(args, switch):
                return {
                    "method": method,
                    "num_tokens": argv.whole(argv.flag_value(args, "--num-drafts"), "--num-drafts"),
                    "draft_model": None,
                }
        return None

    def family(self, args: Sequence[str], image: str | None, note: Note) -> str | None:
        """By what its command is: SparkGLM's `serve MODEL --kernel-target=...`, or Atlas GB10's `spark serve
        MODEL` (the form sparkrun's atlas runtime writes). The image's repository only confirms it, so an image
        from another namespace, or a later --set engine.image, changes nothing."""
        found = "sparkglm" if argv.has_flag(args, "--kernel-target") else "gb10"
        tag_only = image and ":" not in image and "/" not in image  # the repository comes from the table
        named = family_of(f"{IMAGE_REPOSITORY}:{image}" if tag_only else image)
        if named is None and image:
            shape = "serve --kernel-target" if found == "sparkglm" else "spark serve"
            note(
                "engine.family",
                "derived",
                f"{image} is an Atlas image sparkplay has not seen: its command ({shape}) is the {found} family's",
            )
        elif named not in (None, found):
            raise BadInput(
                f"engine.image {image} is an Atlas {named} image, but the command is the {found} family's",
                "make the image and the command agree",
            )
        return found

    def serves_model_argument(self, family: str | None) -> bool:
        return family == "gb10"

    def reads_knobs(self, family: str | None) -> bool:
        return family == "sparkglm"


SPEC = Atlas()
