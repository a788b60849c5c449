"""What an engine's own flags say: context, topology, memory, port, bind, served names, speculative decoding.

Read by each engine's own grammar (vLLM's human-readable integers, SGLang's
and Atlas's flag names), never changed; every value read is one the engine
would read the same way.
"""

from __future__ import annotations

import json
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline
from sparkplay.recipes.raw import RawRecipe

# llama.cpp's draft model from the hub (common/arg.cpp: -hfd, -hfrd, --hf-repo-draft, --spec-draft-hf)
HUB_DRAFT = ("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf")

# Flags whose value is JSON text (vLLM); checked so a bad one fails at import.
JSON_FLAGS = (
    "--speculative-config",
    "--compilation-config",
    "--kv-transfer-config",
    "--hf-overrides",
    "--override-generation-config",
)


def whole(value: str | None, flag: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise BadInput(f"{flag} has a non-integer value {value!r}", f"give {flag} a whole number") from None


def context(raw: RawRecipe, engine: str) -> int | None:
    """The context length the engine's flag states, by the engine's own grammar; auto says so."""
    text = cmdline.flag_value(raw.args, *cmdline.CONTEXT_FLAGS[engine])
    if text is None:
        return None
    value = cmdline.context_value(engine, text)
    if value is None:
        raw.note(
            "context_length",
            "derived",
            f"{cmdline.CONTEXT_FLAGS[engine][0]} {text}: the engine sizes the "
            "context to the memory it has at start, so the recipe states no length",
        )
    return value


def aliases(raw: RawRecipe) -> list[str]:
    """The names vLLM answers to beside its first (--served-model-name is nargs="+" in vLLM's parser)."""
    if raw.engine != "vllm":
        return []
    return cmdline.flag_values(raw.args, "--served-model-name")[1:]


def one_served_name(raw: RawRecipe) -> None:
    """SGLang serves one name (ServerArgs.served_model_name is a single string; its parser refuses what follows
    as unrecognised arguments): a source listing several keeps the first, and the rest are named as left out."""
    names = cmdline.flag_values(raw.args, "--served-model-name")
    if raw.engine != "sglang" or len(names) < 2:
        return
    at = max(i for i, word in enumerate(raw.args) if word == "--served-model-name")
    raw.args = [*raw.args[: at + 2], *raw.args[at + 1 + len(names) :]]
    raw.note(
        "model.served_name",
        "cleaned",
        f"--served-model-name lists {len(names)} names; SGLang serves one (its parser refuses the rest): "
        f"sparkplay serves {names[0]!r} and leaves out {', '.join(repr(n) for n in names[1:])}",
    )


def _float(value: str | None, flag: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise BadInput(f"{flag} has a non-numeric value {value!r}", f"give {flag} a number") from None


def check_json_flags(args: list[str]) -> None:
    for flag in JSON_FLAGS:
        value = cmdline.flag_value(args, flag)
        if value is None:
            continue
        try:
            json.loads(value)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{flag} is not valid JSON ({exc.msg})", f"fix the JSON text given to {flag}") from None


def speculative(raw: RawRecipe) -> dict[str, Any] | None:
    args = raw.args
    if raw.engine == "atlas" and cmdline.has_flag(args, "--dflash", "--draft-model"):
        return {
            "method": "dflash" if cmdline.has_flag(args, "--dflash") else "draft",
            "num_tokens": whole(cmdline.flag_value(args, "--dflash-gamma"), "--dflash-gamma"),
            "draft_model": cmdline.flag_value(args, "--draft-model"),
        }
    # Atlas's own switches: the checkpoint's MTP head (--speculative), n-grams, or the model drafting itself
    for switch, method in (("--speculative", "mtp"), ("--ngram-speculative", "ngram"), ("--self-speculative", "self")):
        if raw.engine == "atlas" and cmdline.has_flag(args, switch):
            return {
                "method": method,
                "num_tokens": whole(cmdline.flag_value(args, "--num-drafts"), "--num-drafts"),
                "draft_model": None,
            }
    if raw.engine == "vllm":
        text = cmdline.flag_value(args, "--speculative-config")
        if text is not None:
            config = json.loads(text)
            if not isinstance(config, dict):
                raise BadInput("--speculative-config is not a JSON object", "give it a JSON object")
            tokens = config.get("num_speculative_tokens")
            method = config.get("method")
            if method is None:
                method = _vllm_speculative_method(config)
                raw.note(
                    "speculative.method",
                    "derived",
                    f"--speculative-config names no method: vLLM detects it from the draft model ({method})",
                )
            return {
                "method": str(method),
                "num_tokens": tokens if isinstance(tokens, int) else None,
                "draft_model": config.get("model"),
            }
    if raw.engine == "sglang":
        algorithm = cmdline.flag_value(args, "--speculative-algorithm", "--speculative-algo")
        if algorithm is not None:
            return {
                "method": algorithm.lower(),
                "num_tokens": whole(cmdline.flag_value(args, "--speculative-num-steps"), "--speculative-num-steps"),
                "draft_model": cmdline.flag_value(args, "--speculative-draft-model-path", "--speculative-draft-model"),
            }
    if raw.engine == "llamacpp":
        return _llamacpp_speculative(args)
    return None


# llama.cpp's draft length (common/arg.cpp: --spec-draft-n-max, and its older spellings)
LLAMACPP_DRAFT_MAX = ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft")


def _llamacpp_speculative(args: list[str]) -> dict[str, Any] | None:
    """llama.cpp's speculative decoding: `--spec-type` names the method(s) (common/speculative.cpp: draft-simple,
    draft-mtp, draft-eagle3, draft-dflash, ngram-*; a comma list; none is off), and a draft GGUF file or hub
    repository (-md, -hfd ...) is the draft model; a draft model without a type is llama.cpp's plain draft."""
    kind = cmdline.flag_value(args, "--spec-type")
    draft = cmdline.flag_value(args, "-md", "--model-draft", "--spec-draft-model") or cmdline.flag_value(
        args, *HUB_DRAFT
    )
    if kind is not None and kind.strip().lower() == "none":
        return None
    if kind is None and draft is None:
        return None
    return {
        "method": kind.strip() if kind is not None else "draft",
        "num_tokens": whole(cmdline.flag_value(args, *LLAMACPP_DRAFT_MAX), "--spec-draft-n-max"),
        "draft_model": draft,
    }


def _vllm_speculative_method(config: dict[str, Any]) -> str:
    """What vLLM's SpeculativeConfig makes of a config without a method (its own detection, current vLLM): an
    EAGLE head by its name ("eagle3-" then "eagle-"), else the draft model's config decides at start
    ("auto": medusa, MLP speculator, MTP or a plain draft model); no draft model at all is refused, as vLLM
    refuses it."""
    draft = config.get("model")
    if not isinstance(draft, str) or not draft:
        raise BadInput(
            "--speculative-config has neither a method nor a draft model: vLLM refuses it too",
            "give it a method (e.g. ngram, mtp) or a draft model",
        )
    name = draft.lower()
    if "eagle3-" in name:
        return "eagle3"
    if "eagle-" in name:
        return "eagle"
    return "auto"


def derive(raw: RawRecipe) -> dict[str, Any]:
    """Context, topology, memory, port and bind as the engine's flags state them."""
    a = raw.args
    flag = cmdline.flag_value
    if raw.engine == "atlas":
        world = whole(flag(a, "--world-size"), "--world-size")
        return {
            "context_length": whole(flag(a, *cmdline.CONTEXT_FLAGS["atlas"]), "--max-seq-len"),
            "tensor_parallel": whole(flag(a, "--tp-size"), "--tp-size"),
            "pipeline_parallel": whole(flag(a, "--pp-size"), "--pp-size"),
            "expert_parallel": whole(flag(a, "--ep-size"), "--ep-size"),
            # one GB10 per Spark: the world is the node count
            "nodes": world,
            "gpu_memory_utilization": _float(flag(a, "--gpu-memory-utilization"), "--gpu-memory-utilization"),
            "port": whole(flag(a, "--port"), "--port"),
            "bind": flag(a, "--host"),
            # SparkGLM's --served-model-name, the atlas-gb10 images' --model-name
            "served_name": flag(a, "--served-model-name", "--model-name"),
        }
    if raw.engine == "vllm":
        tp = whole(flag(a, "--tensor-parallel-size", "-tp"), "--tensor-parallel-size")
        return {
            "context_length": context(raw, "vllm"),
            "tensor_parallel": tp,
            "pipeline_parallel": whole(flag(a, "--pipeline-parallel-size", "-pp"), "--pipeline-parallel-size"),
            # vLLM's expert parallelism spans the tensor- and data-parallel groups together
            "expert_parallel": (tp or 1) * (whole(flag(a, "--data-parallel-size", "-dp"), "--data-parallel-size") or 1)
            if cmdline.has_flag(a, "--enable-expert-parallel", "-ep")
            else None,
            "nodes": whole(flag(a, "--nnodes"), "--nnodes"),
            "gpu_memory_utilization": _float(flag(a, "--gpu-memory-utilization"), "--gpu-memory-utilization"),
            "port": whole(flag(a, "--port"), "--port"),
            "bind": flag(a, "--host"),
            "served_name": flag(a, "--served-model-name"),
        }
    if raw.engine == "sglang":
        return {
            "context_length": whole(flag(a, *cmdline.CONTEXT_FLAGS["sglang"]), "--context-length"),
            "tensor_parallel": whole(flag(a, "--tp-size", "--tensor-parallel-size", "--tp"), "--tp-size"),
            "pipeline_parallel": whole(flag(a, "--pp-size", "--pipeline-parallel-size", "--pp"), "--pp-size"),
            "expert_parallel": whole(flag(a, "--ep-size", "--expert-parallel-size", "--ep"), "--ep-size"),
            "nodes": whole(flag(a, "--nnodes"), "--nnodes"),
            "gpu_memory_utilization": _float(flag(a, "--mem-fraction-static"), "--mem-fraction-static"),
            "port": whole(flag(a, "--port"), "--port"),
            "bind": flag(a, "--host"),
            "served_name": flag(a, "--served-model-name"),
        }
    rpc = flag(a, "--rpc")
    return {
        "context_length": context(raw, "llamacpp"),  # 0: the model's own length
        "tensor_parallel": None,
        "pipeline_parallel": None,
        "expert_parallel": None,
        # llama.cpp's RPC backend: the leader plus one rank per --rpc worker
        "nodes": 1 + len([w for w in rpc.split(",") if w]) if rpc else None,
        "gpu_memory_utilization": None,
        "port": whole(flag(a, "--port"), "--port"),
        "bind": flag(a, "--host"),
        "served_name": flag(a, "-a", "--alias"),
    }
