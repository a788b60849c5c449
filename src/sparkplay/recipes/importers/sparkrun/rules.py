"""sparkrun 0.4.2's rules around a recipe's command and image, read from its source: the served name it appends
to a command template (runtimes/base.py _augment_served_model_name) and when its eugr builder builds an image
rather than pulls it (builders/eugr.py: pull-first)."""

from __future__ import annotations

from typing import Any

from sparkplay import argv, imageref
from sparkplay.engines import registry
from sparkplay.recipes import cmdline


def served_from_defaults(parsed: cmdline.Command, defaults: dict[str, Any]) -> str | None:
    """sparkrun's rule for a command template (RuntimePlugin._augment_served_model_name, every runtime): a
    served_model_name in defaults is appended with the runtime's flag (its engine spec's served_name_flags, the
    first the one sparkrun writes) where the command has none."""
    value = defaults.get("served_model_name")
    flags = registry.spec(parsed.engine).served_name_flags
    if value in (None, "") or argv.has_flag(parsed.args, *flags):
        return None
    parsed.args = [*parsed.args, flags[0], str(value)]
    return (
        f"defaults.served_model_name {value}: sparkrun appends {flags[0]} {value} to a command that leaves it "
        "out, and so does sparkplay"
    )


# build-and-copy.sh's flags that still pull the prebuilt runner (sparkrun's eugr builder,
# _PULL_COMPATIBLE_BUILD_ARGS): any other build_arg asks for a build
PULL_COMPATIBLE = frozenset({"--tf5", "--pre-tf", "--pre-transformers", "--exp-b12x", "--experimental-b12x"})


def arguments(value: Any) -> list[str]:
    """A list of words as a recipe may give it: a list, one word, or nothing."""
    if isinstance(value, list):
        return [str(a) for a in value]
    return [str(value)] if value not in (None, "", {}) else []


def built_locally(data: dict[str, Any], version: str, runtime: str) -> bool:
    """Whether the recipe's image is one its launcher builds rather than pulls, by sparkrun's eugr builder (it is
    pull-first): an eugr recipe (version 1, build_args, eugr's nightly image, or builder: eugr) is built only
    when its build_args ask for a build, or when its image is no pullable reference (a bare local tag such as
    vllm-node, which only eugr's build-and-copy.sh makes)."""
    image = str(data.get("container") or "")
    build_args = arguments(data.get("build_args"))
    nightly = image.startswith("ghcr.io/spark-arena/dgx-vllm-eugr-nightly")
    eugr = data.get("builder") == "eugr" or (
        runtime.startswith("vllm") and (version == "1" or bool(build_args) or nightly)
    )
    if not eugr:
        return bool(data.get("builder")) and "/" not in (imageref.repository(image) or image)
    return any(a not in PULL_COMPATIBLE for a in build_args) or "/" not in (imageref.repository(image) or image)


# sparkrun's image for a recipe that names no container, by runtime, on DGX Spark (platforms/dgx_spark.py,
# _DGX_SPARK_DEFAULTS; `vllm` resolves to vllm-distributed or vllm-ray, alike here). eugr-vllm has none: its
# builder makes the image.
DEFAULT_IMAGES = {
    "vllm": "ghcr.io/spark-arena/dgx-vllm-eugr-nightly-tf5:latest",
    "vllm-distributed": "ghcr.io/spark-arena/dgx-vllm-eugr-nightly-tf5:latest",
    "vllm-ray": "ghcr.io/spark-arena/dgx-vllm-eugr-nightly-tf5:latest",
    "sglang": "scitrera/dgx-spark-sglang:latest",
    "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:latest",
    "atlas": "azeezish/atlas-gb10:latest",
}


def default_image(data: dict[str, Any], version: str, runtime: str) -> str | None:
    """The image sparkrun runs a recipe with no container in: its platform default for the runtime, unless its
    launcher builds one (an eugr recipe)."""
    return None if built_locally(data, version, runtime) else DEFAULT_IMAGES.get(runtime)
