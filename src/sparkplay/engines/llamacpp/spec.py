"""llama.cpp as recipes say it: `llama-server -m FILE` or `-hf REPO[:QUANT]`, its RPC workers, its
speculative types, its LLAMA_ARG_ environment twins, its memory as weights plus KV cache."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from sparkplay import argv
from sparkplay.engines.spec import GIB, Defaults, EngineSpec, Holding, Note, gib

# the hub repository it downloads the model from (common/arg.cpp: -hf, -hfr, --hf-repo)
HUB = ("-hf", "-hfr", "--hf-repo")
# its draft model from the hub (common/arg.cpp: -hfd, -hfrd, --hf-repo-draft, --spec-draft-hf)
HUB_DRAFT = ("-hfd", "-hfrd", "--hf-repo-draft", "--spec-draft-hf")
# its draft length (common/arg.cpp: --spec-draft-n-max, and its older spellings)
DRAFT_MAX = ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft")
CONTEXT = ("--ctx-size", "-c")

# llama.cpp reads every flag from a LLAMA_ARG_ twin too (common/arg.cpp, set_env): the twins of flags that
# take no path and that sparkplay neither owns nor checks against a recipe field are plain; every other
# twin (LLAMA_ARG_RPC, _HOST, _PORT, _MODEL, _LORA, _CTX_SIZE, _API_KEY, ...) is refused
ARG_PLAIN = frozenset(
    """THREADS THREADS_BATCH THREADS_HTTP N_GPU_LAYERS BATCH UBATCH FLASH_ATTN N_PARALLEL CONT_BATCHING
    NO_CONT_BATCHING NO_MMAP MLOCK CACHE_TYPE_K CACHE_TYPE_V DEFRAG_THOLD N_PREDICT ENDPOINT_METRICS
    ENDPOINT_SLOTS ENDPOINT_PROPS NO_WEBUI JINJA REASONING_FORMAT REASONING_BUDGET SPLIT_MODE TENSOR_SPLIT
    MAIN_GPU NUMA NO_KV_OFFLOAD KV_UNIFIED SWA_FULL CACHE_REUSE TOP_K TOP_P MIN_P TEMP REPEAT_PENALTY
    N_CPU_MOE CPU_MOE""".split()
)


class Llamacpp(EngineSpec, name="llamacpp", title="llama.cpp", command="llama-server"):
    # Debian forky's llama.cpp packages; llama-server's default port there
    defaults = Defaults(
        runtime="native",
        port=9931,
        health_timeout_s=120,
        packages=("llama.cpp-tools", "llama.cpp-tools-extra", "libggml0-backend-rpc"),
    )
    context_flags = CONTEXT
    field_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "port": ("--port",),
        "bind": ("--host",),
        "served_name": ("-a", "--alias"),
    }
    images = ("ghcr.io/ggml-org/llama.cpp",)
    native_packages = re.compile(r"^(llama\.cpp(-tools(-extra)?)?|libggml0(-backend-[a-z0-9]+)?|libllama0|libmtmd0)\Z")
    plain_env = frozenset(
        {
            "GGML_CUDA_ENABLE_UNIFIED_MEMORY",
            "GGML_CUDA_NO_PINNED",
            "GGML_CUDA_FORCE_MMQ",
            "GGML_CUDA_FORCE_CUBLAS",
            "GGML_CUDA_NO_VMM",
            "GGML_CUDA_DISABLE_GRAPHS",
            "GGML_SCHED_MAX_COPIES",
            "GGML_RPC_DEBUG",
            "GGML_VK_VISIBLE_DEVICES",
            "GGML_OPENCL_PLATFORM",
            "GGML_OPENCL_DEVICE",
            "LLAMA_LOG_COLORS",
            "LLAMA_LOG_VERBOSITY",
            "LLAMA_LOG_PREFIX",
            "LLAMA_LOG_TIMESTAMPS",
        }
    )
    overhead_bytes = GIB // 2
    serves_local_path = True  # a GGUF file under the model root
    nodes_from_flags = True  # a pasted llama-server names its RPC workers itself (--rpc), or has none
    model_is_file = True  # -m is always a file (org/file.gguf looks like a repository but is not one)
    api_key_env = "LLAMA_API_KEY"
    kv_from_header = True  # the GGUF header's layers, KV heads and head size
    answers_exact = True  # its CPU and CUDA kernels are fixed at build
    served_name_flags = ("--alias", "-a")
    program = ("llama-server",)
    spellings = ("llama.cpp", "llama-cpp", "llamacpp", "llama-server", "llama_cpp")
    own_flags = frozenset(
        "-hf --hf-repo --hf-file -ngl --n-gpu-layers --ctx-size --jinja -fa --flash-attn --cache-type-k "
        "--cache-type-v --no-mmap --mlock".split()
    )
    added_flags: ClassVar[Mapping[str, str]] = {
        "--metrics": "llama-server's Prometheus /metrics (off unless asked for), which sparkplay's metrics and "
        "watchdog read"
    }

    def command_words(self, model: str) -> list[str]:
        local = model.endswith(".gguf") or model.startswith(("/", "."))  # a file, else a hub repository (-hf)
        return [*self.program, "-m" if local else "-hf", model]

    def recognise(self, program: str, rest: Sequence[str]) -> tuple[str | None, list[str]] | None:
        if program != "llama-server":
            return None
        return argv.flag_value(rest, "-m", "--model"), list(rest)

    def context_value(self, text: str) -> int | None:
        if text.strip() == "0":
            return None  # the model's own context length
        return super().context_value(text)

    def derive(self, args: Sequence[str], note: Note) -> dict[str, Any]:
        found = super().derive(args, note)
        rpc = argv.flag_value(args, "--rpc")
        # its RPC backend: the leader plus one rank per --rpc worker
        found["nodes"] = 1 + len([w for w in rpc.split(",") if w]) if rpc else None
        return found

    def speculative(self, args: Sequence[str], note: Note) -> dict[str, Any] | None:
        """`--spec-type` names the method(s) (common/speculative.cpp: draft-simple, draft-mtp, draft-eagle3,
        draft-dflash, ngram-*; a comma list; none is off), and a draft GGUF file or hub repository (-md,
        -hfd ...) is the draft model; a draft model without a type is llama.cpp's plain draft."""
        kind = argv.flag_value(args, "--spec-type")
        draft = argv.flag_value(args, "-md", "--model-draft", "--spec-draft-model") or argv.flag_value(args, *HUB_DRAFT)
        if kind is not None and kind.strip().lower() == "none":
            return None
        if kind is None and draft is None:
            return None
        return {
            "method": kind.strip() if kind is not None else "draft",
            "num_tokens": argv.whole(argv.flag_value(args, *DRAFT_MAX), "--spec-draft-n-max"),
            "draft_model": draft,
        }

    def serves_model_argument(self, family: str | None) -> bool:
        return False

    def unnamed(self, recipe_name: str | None) -> str | None:
        # llama-server names a model by its file unless told; the plan gives it --alias (the recipe's name),
        # which the probe, the gateway and the bench ask for: an argv the source never had, so said
        return (
            f"no --alias: llama-server would name the model by its file; sparkplay serves it as the recipe's "
            f"name ({recipe_name or 'the name it is imported as'}, --alias), which its clients ask for "
            "(--set model.served_name=NAME for another)"
        )

    def hub_model(self, args: Sequence[str]) -> str | None:
        return argv.flag_value(args, *HUB)

    def gguf(
        self, args: Sequence[str], model: str | None, repo: str | None, quant: str | None
    ) -> dict[str, Any] | None:
        hub = self.hub_model(args)
        draft = argv.flag_value(args, *HUB_DRAFT)
        ref = None if model or not (hub or repo) else hub or (f"{repo}:{quant}" if quant else str(repo))
        if ref is None and draft is None:
            return None
        projector = not any(argv.has_flag(args, f) for f in ("--no-mmproj", "--no-mmproj-auto", "--mmproj"))
        return {
            "ref": ref,
            "file": argv.flag_value(args, "-hff", "--hf-file"),
            "mmproj": projector,
            "projector": None,
            "draft_ref": draft,
            "draft": None,
        }

    def plain(self, name: str, path_shaped: Callable[[str], bool]) -> bool:
        # its LLAMA_ARG_ twins: those refused_twin passes are plain
        return name.startswith("LLAMA_ARG_") or super().plain(name, path_shaped)

    def refused_twin(self, name: str) -> str | None:
        if name.startswith("LLAMA_ARG_") and name.removeprefix("LLAMA_ARG_") not in ARG_PLAIN:
            flag = "--" + name.removeprefix("LLAMA_ARG_").lower().replace("_", "-")
            return f"is llama.cpp's environment twin of {flag}, which sparkplay owns or checks"
        return None

    def claim(self, rank: Mapping[str, Any], holding: Holding) -> tuple[int, str]:
        # the leader's context: its RPC workers (rpc-server, no -c) hold their layers' part of its cache
        kv_per_token = holding.kv_per_token
        context = int(argv.flag_value(holding.leader.get("argv") or [], *CONTEXT) or 0) if kv_per_token else 0
        kv = -(-(context * (kv_per_token or 0)) // max(holding.ranks, 1))
        how = f"its share of the weights {gib(holding.share)}"
        how += f", of a {context}-token KV cache {gib(kv)}" if kv else ""
        how += f", {gib(self.overhead_bytes)} for its process"
        return holding.share + kv + self.overhead_bytes, how


SPEC = Llamacpp()
