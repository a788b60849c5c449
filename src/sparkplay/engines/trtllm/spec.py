"""TensorRT-LLM as recipes say it: `trtllm-serve [serve] MODEL`, alone or as NVIDIA's DGX Spark playbook
launches it across nodes (`mpirun ... trtllm-llmapi-launch trtllm-serve MODEL --tp_size 2`).

The grammar is trtllm-serve's own (tensorrt_llm/commands/serve.py, a click command): options spelled with
underscores, several with two names (`--tensor_parallel_size`/`--tp_size`), the KV cache's share of the memory
left free after the weights (`--free_gpu_memory_fraction`/`--kv_cache_free_gpu_memory_fraction`, 0.9)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sparkplay import argv
from sparkplay.engines.spec import Defaults, EngineSpec, Holding, Note, gib

# mpirun's options that take a value (OpenMPI's mpirun(1)): what a pasted multi-node line puts before the
# launcher; the plan writes its own mpirun, so these are read past, never kept
MPIRUN_VALUED = frozenset(
    "-np -n -c --np -N --npernode -H --host -hostfile --hostfile --machinefile -x --mca -mca --map-by --bind-to "
    "--rank-by --prefix -wdir --wdir --report-bindings-file --output-filename --tag-output-file".split()
)
# trtllm-serve's serve options (serve.py, read at NVIDIA/TensorRT-LLM 00209af): every flag a plan writes is one
# of these (tests/test_engines_trtllm.py), the check its own parser would make if it installed without a GPU
SERVE_OPTIONS = frozenset(
    """--tokenizer --custom_tokenizer --host --port --backend --custom_module_dirs --log_level --max_beam_width
    --max_batch_size --max_num_tokens --max_seq_len --tensor_parallel_size --tp_size --pipeline_parallel_size
    --pp_size --context_parallel_size --cp_size --moe_expert_parallel_size --ep_size --moe_cluster_parallel_size
    --cluster_size --gpus_per_node --free_gpu_memory_fraction --kv_cache_free_gpu_memory_fraction
    --num_postprocess_workers --trust_remote_code --revision --config --extra_llm_api_options --reasoning_parser
    --tool_parser --metadata_server_config_file --server_role --fail_fast_on_attention_window_too_large
    --otlp_traces_endpoint --disagg_cluster_uri --enable_chunked_prefill --media_io_kwargs --chat_template""".split()
)
TP = ("--tensor_parallel_size", "--tp_size")
PP = ("--pipeline_parallel_size", "--pp_size")
EP = ("--moe_expert_parallel_size", "--ep_size")
KV_FRACTION = ("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction")
# a YAML file of LLM API settings on the author's machine: sparkplay cannot carry it to the ranks
CONFIG = ("--config", "--extra_llm_api_options")


def launcher_words(words: Sequence[str]) -> int:
    """The words of an mpirun prefix (its options) and trtllm-llmapi-launch before trtllm-serve."""
    i = 0
    if words and words[0].rsplit("/", 1)[-1] in ("mpirun", "mpiexec"):
        i = 1
        while i < len(words) and words[i].startswith("-"):
            i += 2 if words[i] in MPIRUN_VALUED else 1
    if i < len(words) and words[i].rsplit("/", 1)[-1] == "trtllm-llmapi-launch":
        i += 1
    return i if i < len(words) and words[i].rsplit("/", 1)[-1] == "trtllm-serve" else 0


# how its serve command is written (the error for a command of no known engine lists it)
COMMAND = "trtllm-serve MODEL, alone or under mpirun ... trtllm-llmapi-launch"


# the image a recipe that names none runs in (engines/spec.py Defaults.image), and whose guide it follows
IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13"
IMAGE_FROM = "NVIDIA's TensorRT-LLM playbook for DGX Spark (build.nvidia.com/spark/trt-llm)"


class Trtllm(EngineSpec, name="trtllm", title="TensorRT-LLM", command=COMMAND):
    # NVIDIA's release image serves on trtllm-serve's default port; the first start loads and may autotune
    defaults = Defaults(runtime="docker", port=8000, health_timeout_s=1800, image=IMAGE, image_from=IMAGE_FROM)
    context_flags = ("--max_seq_len",)
    field_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "tensor_parallel": TP,
        "pipeline_parallel": PP,
        "expert_parallel": EP,
        "port": ("--port",),
        "bind": ("--host",),
    }
    images = ("nvcr.io/nvidia/*",)  # its release images (nvcr.io/nvidia/tensorrt-llm/release)
    program = ("trtllm-serve",)
    spellings = ("tensorrt-llm", "tensorrt_llm", "trtllm")
    own_flags = frozenset(
        "--max_seq_len --max_batch_size --max_num_tokens --extra_llm_api_options --tp_size --pp_size --ep_size "
        "--kv_cache_free_gpu_memory_fraction".split()
    )
    revision_flag = "--revision"
    knobs_read = frozenset({"gpu_memory_utilization"})  # its KV cache fraction
    per_rank = ("--gpus_per_node",)  # one GB10 per Spark: the plan sets it

    def launcher(self, words: Sequence[str]) -> int:
        return launcher_words(words)

    def recognise(self, program: str, rest: Sequence[str]) -> tuple[str | None, list[str]] | None:
        if program != "trtllm-serve":
            return None
        words = list(rest[1:] if rest[:1] == ["serve"] else rest)  # serve is the click group's default command
        if words and not words[0].startswith("-"):
            return words[0], words[1:]
        return None, words

    def context_value(self, text: str) -> int | None:
        return argv.whole(text, "--max_seq_len")

    def derive(self, args: Sequence[str], note: Note) -> dict[str, Any]:
        found = super().derive(args, note)
        # its KV cache takes this share of what the weights leave free: sparkplay's memory knob reads it
        found["gpu_memory_utilization"] = argv.number(argv.flag_value(args, *KV_FRACTION), KV_FRACTION[0])
        return found

    def left_out(self, args: Sequence[str], note: Note) -> list[str]:
        """The LLM API file --config names is on the author's machine (the playbook writes it with a heredoc
        before the launch): left out and said, with what that loses."""
        given = argv.flag_value(args, *CONFIG)
        if given is None:
            return list(args)
        note(
            "serve.args",
            "ignored",
            f"--extra_llm_api_options {given} names a YAML file on the author's machine, which sparkplay cannot "
            "carry to the ranks: its settings are not applied (give them as trtllm-serve flags where one exists, "
            "e.g. --kv_cache_free_gpu_memory_fraction, --max_batch_size)",
        )
        return argv.without_flags(args, *CONFIG)

    def claim(self, rank: Mapping[str, Any], holding: Holding) -> tuple[int, str]:
        """The weights, then the KV cache's fraction of what they leave free on the node, then its process."""
        text = argv.flag_value(rank.get("argv") or [], *KV_FRACTION)
        fraction = float(text) if text is not None else 0.9
        kv = int(fraction * max(holding.total - holding.share, 0))
        how = (
            f"its share of the weights {gib(holding.share)}, a KV cache of {fraction} of what they leave free "
            f"({gib(kv)}), {gib(self.overhead_bytes)} for its process"
        )
        return holding.share + kv + self.overhead_bytes, how


SPEC = Trtllm()
