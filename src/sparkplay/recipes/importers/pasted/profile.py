"""A model's `vllm_profile.conf`: the PROFILE_* shell variables MvdB's DGX Spark runner (dgx-spark-vllm's
runner/vllm_spark.sh) sources before it starts vLLM.

A profile is a recipe in variables: the runner turns it into one `docker run` of vLLM, by fixed rules read
from its source (apply_model_profile, stage_run_vllm): its own defaults for what a profile leaves out, a flag
per variable set, prefix caching and chunked prefill always, `--trust-remote-code` right after the model, the
profile's Docker environment, `--ipc host` or a 10 GB /dev/shm. The model is not in the profile: the runner
serves the folder the profile lies in, named `<owner>--<name>` after the Hugging Face repository. This
reader writes that `docker run` out and imports it as any pasted one, so every rule of the pasted importer
(the image, the environment's allow-list, the flags' grammar) applies; what the runner decides that a
profile does not say (its image's tag) is named in the import's output.
"""

from __future__ import annotations

import posixpath
import re
import shlex

from sparkplay import imageref
from sparkplay.errors import BadInput

# the runner's image when a profile names none (IMAGE_REPO:DEFAULT_VLLM_TAG in vllm_spark.sh as read)
RUNNER_IMAGE = "vllm/vllm-openai:v0.19.0"
# what the runner sets before it sources a profile
DEFAULTS = {"GPU_MEM_UTIL": "0.85", "MAX_MODEL_LEN": "32768", "MAX_NUM_SEQS": "4", "KV_CACHE_DTYPE": "fp8"}
# in the runner's order: a variable that is set (non-empty) becomes its flag and value
VALUED = (
    ("DTYPE", "--dtype"),
    ("QUANTIZATION", "--quantization"),
    ("GPU_MEM_UTIL", "--gpu-memory-utilization"),
    ("MAX_MODEL_LEN", "--max-model-len"),
    ("MAX_NUM_SEQS", "--max-num-seqs"),
    ("MAX_NUM_BATCHED_TOKENS", "--max-num-batched-tokens"),
    ("ENFORCE_EAGER", None),  # a switch: 1 is --enforce-eager
    ("NUM_GPU_BLOCKS_OVERRIDE", "--num-gpu-blocks-override"),
    ("KV_CACHE_DTYPE", "--kv-cache-dtype"),
    ("", "--enable-prefix-caching"),  # always
    ("", "--enable-chunked-prefill"),  # always
    ("HF_OVERRIDES", "--hf-overrides"),
    ("ATTENTION_BACKEND", "--attention-backend"),
    ("REASONING_PARSER", "--reasoning-parser"),
    ("REASONING_PARSER_PLUGIN", "--reasoning-parser-plugin"),
    ("CHAT_TEMPLATE", "--chat-template"),
    ("ENABLE_AUTO_TOOL_CHOICE", None),  # a switch: 1 is --enable-auto-tool-choice
    ("TOOL_CALL_PARSER", "--tool-call-parser"),
    ("TOKENIZER_MODE", "--tokenizer-mode"),
    ("CONFIG_FORMAT", "--config-format"),
    ("LOAD_FORMAT", "--load-format"),
)
SWITCHES = {"ENFORCE_EAGER": "--enforce-eager", "ENABLE_AUTO_TOOL_CHOICE": "--enable-auto-tool-choice"}
# what the runner reads for its own start, not for vLLM's arguments
RUNNER_OWN = {"VLLM_COMPATIBLE", "NOTES", "DOCKER_IMAGE", "BASH_WRAPPER", "IPC_HOST", "DOCKER_ENV", "TRUST_REMOTE_CODE"}
FOLDER = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)--([A-Za-z0-9][A-Za-z0-9._-]*)$")
ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")


def is_profile(scalars: dict[str, str], arrays: dict[str, list[str]]) -> bool:
    return any(k.startswith("PROFILE_") for k in [*scalars, *arrays])


def model_of(where: str) -> str:
    """The Hugging Face repository the runner serves: the profile's folder, `<owner>--<name>`."""
    folder = posixpath.basename(posixpath.dirname(where.replace("\\", "/")))
    found = FOLDER.match(folder)
    if not found:
        raise BadInput(
            f"{where} is a vllm_profile.conf, which names no model: its runner serves the folder the profile lies "
            f"in, named <owner>--<name> (this one is in {folder or 'no folder'!r})",
            "import the profile from its model's folder (…/<owner>--<name>/vllm_profile.conf)",
        )
    return f"{found.group(1)}/{found.group(2)}"


def command(scalars: dict[str, str], arrays: dict[str, list[str]], where: str) -> tuple[str, list[str]]:
    """The `docker run` the runner would start for this profile, and what the import says about it."""
    profile = {k.removeprefix("PROFILE_"): v for k, v in scalars.items() if k.startswith("PROFILE_")}
    extra = list(arrays.get("PROFILE_VLLM_EXTRA_ARGS") or shlex.split(profile.pop("VLLM_EXTRA_ARGS", "") or ""))
    if profile.get("VLLM_COMPATIBLE", "1").strip() == "0":
        raise BadInput(
            f"{where} says its model does not run on vLLM (PROFILE_VLLM_COMPATIBLE=0"
            + (f": {profile['NOTES']}" if profile.get("NOTES") else "")
            + ")",
            "serve the model with another engine's recipe, or fix the profile first",
        )
    repo = model_of(where)
    folder = posixpath.basename(posixpath.dirname(where.replace("\\", "/")))
    said = [
        f"read as its runner (vllm_spark.sh) starts it, the model from the profile's folder: {repo} (the runner "
        f"serves the local copy /hf_models/{folder} under that path as its name; sparkplay downloads {repo})"
    ]
    values = {**DEFAULTS, **{k: v for k, v in profile.items() if v.strip()}}
    args: list[str] = [repo]
    if values.get("TRUST_REMOTE_CODE", "0").strip() == "1":
        args.append("--trust-remote-code")
    for key, flag in VALUED:
        if not key:
            args.append(flag or "")
        elif key in SWITCHES:
            args += [SWITCHES[key]] if values.get(key, "0").strip() == "1" else []
        elif values.get(key):
            args += [flag or "", values[key]]
    args += extra
    image = profile.get("DOCKER_IMAGE") or RUNNER_IMAGE
    if not imageref.is_reference(image):  # never docker's options (`-v /:/host ...`)
        raise BadInput(f"{where}: PROFILE_DOCKER_IMAGE holds {image!r}, which is no image reference", "give REPO:TAG")
    if not profile.get("DOCKER_IMAGE"):
        said.append(f"the profile names no image: the runner's own default, {RUNNER_IMAGE}, is used")
    docker = ["docker", "run", "--gpus", "all"]
    docker += ["--ipc", "host"] if values.get("IPC_HOST", "0").strip() == "1" else ["--shm-size", "10g"]
    for word in (profile.get("DOCKER_ENV") or "").split():
        if not ENV_WORD.match(word):
            raise BadInput(f"{where}: PROFILE_DOCKER_ENV holds {word!r}, not NAME=VALUE", "fix the profile")
        docker += ["-e", word]
    known = {k for k, _ in VALUED if k} | RUNNER_OWN | {"VLLM_EXTRA_ARGS"}
    unread = sorted(k for k in profile if k not in known)
    if unread:
        said.append(
            "left out, as the runner that was read does not use them: " + ", ".join(f"PROFILE_{k}" for k in unread)
        )
    return shlex.join([*docker, image, *args]), said
