"""sparkrun's flag maps: a recipe's `defaults` key -> the engine flag sparkrun writes for it (a True boolean a
bare switch), per runtime, as sparkrun's runtimes define them. Used for recipes with no command template. And
which of sparkrun's container settings (executor_config) sparkplay's own container already has."""

from __future__ import annotations

from typing import Any

# executor_config keys sparkplay reads into the recipe
EXECUTOR_HONOURED = ("shm_size",)

# defaults key -> flag, per engine (sparkrun's flag maps); a True boolean is a bare switch
VLLM_FLAGS = {
    "port": "--port", "host": "--host", "tensor_parallel": "--tensor-parallel-size",
    "pipeline_parallel": "--pipeline-parallel-size", "data_parallel": "--data-parallel-size",
    "gpu_memory_utilization": "--gpu-memory-utilization", "max_model_len": "--max-model-len",
    "served_model_name": "--served-model-name",
}  # fmt: skip
LLAMACPP_FLAGS = {
    "port": "--port", "host": "--host", "max_model_len": "--ctx-size", "served_model_name": "--alias",
    "n_gpu_layers": "--n-gpu-layers", "parallel": "--parallel", "threads": "--threads",
}  # fmt: skip
# sparkrun's SGLang runtime's flag map (a True boolean a switch)
SGLANG_FLAGS = {
    "port": "--port", "host": "--host", "tensor_parallel": "--tp-size", "pipeline_parallel": "--pp-size",
    "gpu_memory_utilization": "--mem-fraction-static", "max_model_len": "--context-length",
    "max_num_seqs": "--max-running-requests", "served_model_name": "--served-model-name", "dtype": "--dtype",
    "quantization": "--quantization", "trust_remote_code": "--trust-remote-code",
    "chunked_prefill": "--chunked-prefill-size", "kv_cache_dtype": "--kv-cache-dtype",
    "tokenizer_path": "--tokenizer-path", "speculative_draft_model_path": "--speculative-draft-model-path",
    "speculative_draft_model": "--speculative-draft-model-path", "api_key": "--api-key",
    "enable_torch_compile": "--enable-torch-compile", "disable_radix_cache": "--disable-radix-cache",
}  # fmt: skip
# sparkrun's Atlas runtime (the avarok/atlas-gb10 images): its flag map, switches listed below
ATLAS_FLAGS = {
    "port": "--port", "host": "--host", "tensor_parallel": "--tp-size", "ep_size": "--ep-size",
    "gpu_memory_utilization": "--gpu-memory-utilization", "max_model_len": "--max-seq-len",
    "max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-prefill-tokens",
    "served_model_name": "--model-name", "kv_cache_dtype": "--kv-cache-dtype", "draft_model": "--draft-model",
    "max_batch_size": "--max-batch-size", "block_size": "--block-size",
    "kv_high_precision_layers": "--kv-high-precision-layers", "tool_call_parser": "--tool-call-parser",
    "tool_max_tokens": "--tool-max-tokens", "scheduling_policy": "--scheduling-policy",
    "tbt_deadline_ms": "--tbt-deadline-ms", "max_prefill_tokens": "--max-prefill-tokens",
    "oom_guard_mb": "--oom-guard-mb", "ssm_cache_slots": "--ssm-cache-slots",
    "ssm_checkpoint_interval": "--ssm-checkpoint-interval", "mtp_quantization": "--mtp-quantization",
    "mtp_vocab": "--mtp-vocab", "num_drafts": "--num-drafts", "dflash_gamma": "--dflash-gamma",
    "dflash_window_size": "--dflash-window-size", "max_thinking_budget": "--max-thinking-budget",
    "model_from_path": "--model-from-path", "cache_dir": "--cache-dir", "gpu_ordinal": "--gpu-ordinal",
    "high_speed_swap_dir": "--high-speed-swap-dir", "high_speed_swap_gb": "--high-speed-swap-gb",
    "high_speed_swap_resident_blocks": "--high-speed-swap-resident-blocks",
    "high_speed_swap_rank": "--high-speed-swap-rank", "high_speed_swap_qd": "--high-speed-swap-qd",
    "high_speed_swap_cache_blocks_per_seq": "--high-speed-swap-cache-blocks-per-seq",
    "api_key": "--auth-token", "auth_token": "--auth-token",
    # present-when-true switches
    "enable_prefix_caching": "--enable-prefix-caching", "speculative": "--speculative", "dflash": "--dflash",
    "self_speculative": "--self-speculative", "ngram_speculative": "--ngram-speculative",
    "disable_thinking": "--disable-thinking", "high_speed_swap": "--high-speed-swap", "require_auth": "--require-auth",
}  # fmt: skip


def executor_left(executor: dict[str, Any], engine: str) -> dict[str, Any]:
    """sparkrun's executor_config less what sparkplay's own container already does: the shared memory it reads;
    for vLLM and SGLang (engines/context.py gpu_container_options) memlock unlimited and IPC_LOCK; `ssh` is how
    sparkrun reaches the hosts, not the container (sparkplay has its inventory and peer ssh)."""
    left = {k: v for k, v in executor.items() if k not in (*EXECUTOR_HONOURED, "ssh")}
    if engine in ("vllm", "sglang"):
        limits = [u for u in left.get("ulimit") or [] if str(u).replace(" ", "") not in ("memlock=-1", "memlock=-1:-1")]
        caps = [c for c in left.get("cap_add") or [] if str(c).upper() not in ("IPC_LOCK", "CAP_IPC_LOCK")]
        left.update({"ulimit": limits, "cap_add": caps})
    return {k: v for k, v in left.items() if v not in ([], None) or k not in ("ulimit", "cap_add")}
