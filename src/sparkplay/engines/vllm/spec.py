"""vLLM as recipes say it: `vllm serve MODEL` (or its OpenAI server module), its parser's spelling and
human-readable integers, its speculative config, its memory fraction, its CPU build's claim."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sparkplay import argv
from sparkplay.engines.spec import GIB, Defaults, EngineSpec, Fraction, Holding, KnownModel, Note, gib, split_model
from sparkplay.errors import BadInput

# vLLM's human-readable integers (its arg_utils): decimal k/m/g/t, binary K/M/G/T (no decimals), and
# -1 or auto for "as long as the memory allows"
_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])\Z")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

CPU_KV_DEFAULT_GIB = 4  # vLLM's CPU worker when VLLM_CPU_KVCACHE_SPACE is unset or 0


def option_spelling(arg: str) -> str:
    """An argument as vLLM's FlexibleArgumentParser reads it: in a long option's name, underscores between the
    `--` and the first `.` become dashes (`--max_model_len` is `--max-model-len`); what follows that dot is a
    key of the option's JSON value and stays byte for byte (`--compilation_config.cudagraph_mode` is
    `--compilation-config.cudagraph_mode`). A value after `=` is the user's, untouched."""
    if not arg.startswith("--"):
        return arg
    name, eq, value = arg.partition("=")
    option, dot, keys = name[2:].partition(".")
    return "--" + option.replace("_", "-") + dot + keys + eq + value


def speculative_method(config: Mapping[str, Any]) -> str:
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


# the image a recipe that names none runs in (engines/spec.py Defaults.image), and whose guide it follows
IMAGE = "nvcr.io/nvidia/vllm:26.05-py3"
IMAGE_FROM = "NVIDIA's vLLM playbook for DGX Spark (build.nvidia.com/spark/vllm)"


class Vllm(EngineSpec, name="vllm", title="vLLM", command="vllm serve MODEL"):
    # vLLM's OpenAI server default port; first boots can autotune for an hour, recipes raise this through
    # VLLM_ENGINE_READY_TIMEOUT_S
    defaults = Defaults(runtime="docker", port=8000, health_timeout_s=1800, image=IMAGE, image_from=IMAGE_FROM)
    ready_timeout_env = "VLLM_ENGINE_READY_TIMEOUT_S"
    context_flags = ("--max-model-len",)
    field_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "tensor_parallel": ("--tensor-parallel-size", "-tp"),
        "pipeline_parallel": ("--pipeline-parallel-size", "-pp"),
        "nodes": ("--nnodes",),
        "gpu_memory_utilization": ("--gpu-memory-utilization",),
        "port": ("--port",),
        "bind": ("--host",),
        "served_name": ("--served-model-name",),
    }
    images = ("vllm/vllm-openai", "nvcr.io/nvidia/*", "scitrera/*")
    memory_fraction = Fraction(("--gpu-memory-utilization",), (), 0.9)
    folder_model = True
    serves_local_path = True
    native_self_installed = True  # its CPU build (engines/vllm/cpu.py)
    revision_flag = "--revision"
    api_key_env = "VLLM_API_KEY"
    knobs_read = frozenset({"gpu_memory_utilization"})
    served_name_flags = ("--served-model-name",)
    program = ("vllm", "serve")
    spellings = ("vllm",)
    claimed_flags = frozenset({"--tensor-parallel-size", "--model"})  # its images are the ones run with flags alone
    own_flags = frozenset(
        "--max-model-len --gpu-memory-utilization --max-num-seqs --max-num-batched-tokens --enforce-eager "
        "--async-scheduling --compilation-config --speculative-config --enable-prefix-caching "
        "--enable-chunked-prefill --distributed-executor-backend --enable-expert-parallel".split()
    )
    per_rank = (
        "--nnodes",
        "--node-rank",
        "--master-addr",
        "--master-port",
        "--headless",
        "--data-parallel-address",
        "--data-parallel-rpc-port",
        "--data-parallel-start-rank",
        "--data-parallel-size-local",
    )
    # the environment twins of the data-parallel flags the plan sets per rank (--data-parallel-address ...):
    # a recipe's would point a rank at another master. (VLLM_HOST_IP and the socket names the plan overwrites
    # with each rank's own, so a recipe's are noted as overridden at import, not refused.)
    owned_env = frozenset(
        {"VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT", "VLLM_DP_RANK", "VLLM_DP_RANK_LOCAL", "VLLM_DP_SIZE"}
    )
    plain_env = frozenset(
        {
            "VLLM_CPU_KVCACHE_SPACE",
            "VLLM_CPU_OMP_THREADS_BIND",
            "VLLM_CPU_NUM_OF_RESERVED_CPU",
            "VLLM_CPU_MOE_PREPACK",
            "VLLM_CPU_SGL_KERNEL",
            "VLLM_NO_USAGE_STATS",
            "VLLM_DO_NOT_TRACK",
            "VLLM_LOGGING_LEVEL",
            "VLLM_CONFIGURE_LOGGING",
            "VLLM_LOG_STATS_INTERVAL",
            "VLLM_ATTENTION_BACKEND",
            "VLLM_USE_V1",
            "VLLM_WORKER_MULTIPROC_METHOD",
            "VLLM_ENABLE_V1_MULTIPROCESSING",
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
            "VLLM_ENGINE_ITERATION_TIMEOUT_S",
            "VLLM_ENGINE_READY_TIMEOUT_S",
            "VLLM_RPC_TIMEOUT",
            "VLLM_USE_FLASHINFER_SAMPLER",
            "VLLM_MLA_DISABLE",
            "VLLM_USE_DEEP_GEMM",
            "VLLM_FUSED_MOE_CHUNK_SIZE",
            "VLLM_MARLIN_USE_ATOMIC_ADD",
            "VLLM_SLEEP_WHEN_IDLE",
            "VLLM_MEDIA_LOADING_THREAD_COUNT",
            "VLLM_MLA_NOPE_PAD_ROPE",
        }
    )
    models = (
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

    def recognise(self, program: str, rest: Sequence[str]) -> tuple[str | None, list[str]] | None:
        if program == "vllm" and rest[:1] == ["serve"]:
            model, args = split_model(rest[1:])  # vLLM reads --model where no positional model is given
            return model or argv.flag_value(args, "--model"), args
        if program in ("python", "python3") and list(rest[:2]) == ["-m", "vllm.entrypoints.openai.api_server"]:
            args = list(rest[2:])
            return argv.flag_value(args, "--model"), args
        return None

    def context_value(self, text: str) -> int | None:
        value = text.strip()
        if value == "-1" or value.lower() == "auto":
            return None
        if match := _HUMAN_INT.match(value):
            count, suffix = match.groups()
            if suffix in _DECIMAL:
                return int(float(count) * _DECIMAL[suffix])
            if count.isdigit():
                return int(count) * _BINARY[suffix]
        return super().context_value(text)

    def derive(self, args: Sequence[str], note: Note) -> dict[str, Any]:
        found = super().derive(args, note)
        tp = found["tensor_parallel"]
        # vLLM's expert parallelism spans the tensor- and data-parallel groups together
        if argv.has_flag(args, "--enable-expert-parallel", "-ep"):
            dp = argv.whole(argv.flag_value(args, "--data-parallel-size", "-dp"), "--data-parallel-size")
            found["expert_parallel"] = (tp or 1) * (dp or 1)
        return found

    def speculative(self, args: Sequence[str], note: Note) -> dict[str, Any] | None:
        text = argv.flag_value(args, "--speculative-config")
        if text is None:
            return None
        config = json.loads(text)
        if not isinstance(config, dict):
            raise BadInput("--speculative-config is not a JSON object", "give it a JSON object")
        tokens = config.get("num_speculative_tokens")
        method = config.get("method")
        if method is None:
            method = speculative_method(config)
            note(
                "speculative.method",
                "derived",
                f"--speculative-config names no method: vLLM detects it from the draft model ({method})",
            )
        return {
            "method": str(method),
            "num_tokens": tokens if isinstance(tokens, int) else None,
            "draft_model": config.get("model"),
        }

    def aliases(self, args: Sequence[str]) -> list[str]:
        # --served-model-name is nargs="+" in vLLM's parser: the names beside its first
        return argv.flag_values(args, "--served-model-name")[1:]

    def spelled(self, args: Sequence[str]) -> list[str]:
        return [option_spelling(arg) for arg in args]

    def refused_twin(self, name: str) -> str | None:
        if name in self.owned_env:
            return "is the environment twin of a data-parallel flag sparkplay sets per rank"
        return None

    def claim(self, rank: Mapping[str, Any], holding: Holding) -> tuple[int, str]:
        if holding.runtime != "native":
            return super().claim(rank, holding)
        space = int((rank.get("env") or {}).get("VLLM_CPU_KVCACHE_SPACE") or 0) or CPU_KV_DEFAULT_GIB
        how = (
            f"vLLM's CPU build holds its share of the weights {gib(holding.share)} and a {space} GiB KV cache "
            f"(VLLM_CPU_KVCACHE_SPACE), plus {gib(self.overhead_bytes)} for its process"
        )
        return holding.share + space * GIB + self.overhead_bytes, how


SPEC = Vllm()
