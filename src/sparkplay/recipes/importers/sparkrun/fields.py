"""A sparkrun recipe's fields as sparkplay takes them: the runtimes and what each is here, the fields read, those
that only describe, the launcher features sparkplay does not carry and why (the import says each reason); the
benchmark block read as the bench profile sparkplay runs."""

from __future__ import annotations

from typing import Any

# sparkrun runtime -> (sparkplay engine, vLLM distributed back end)
RUNTIMES: dict[str, tuple[str, str | None]] = {
    "vllm": ("vllm", None),
    "vllm-distributed": ("vllm", "mp"),
    "vllm-ray": ("vllm", "ray"),
    "llama-cpp": ("llamacpp", None),
    "llama.cpp": ("llamacpp", None),
    "llamacpp": ("llamacpp", None),
    "atlas": ("atlas", None),
    "sglang": ("sglang", None),
    "trtllm": ("trtllm", None),
}
# a command's first word -> runtime, when `runtime` is left out (sparkrun's own detection; its `mpirun ...
# trtllm` is the mpirun line that names trtllm after it)
COMMAND_HINTS = (
    ("vllm", "vllm"),
    ("llama-server", "llama-cpp"),
    ("trtllm-serve", "trtllm"),
    ("serve", "atlas"),
    ("spark", "atlas"),
    ("sglang", "sglang"),
    ("python3", "sglang"),
    ("python", "sglang"),
)

READ = {
    "recipe_version",
    "name",
    "model",
    "model_revision",
    "runtime",
    "container",
    "min_nodes",
    "max_nodes",
    "mode",
    "solo_only",
    "cluster_only",
    "defaults",
    "env",
    "command",
    "metadata",
    "distribution_config",
    "executor_config",
    "benchmark",
}
# fields that only describe a recipe (sparkrun's own and the registries' habits): kept in extra, nothing to apply
DESCRIPTIVE = frozenset({"description", "maintainer", "model_url", "sparkrun_version", "author", "tags", "license"})
# launcher features sparkplay has no equivalent for: reported, kept in extra
NOT_HONOURED = (
    "mods",
    "pre_exec",
    "post_exec",
    "post_commands",
    "builder",
    "build_args",
    "runtime_config",
    "docker_image_dir",
)
# sparkrun's benchmark block (core/benchmark_profiles.py): its own keys; any other key is an argument
BENCH_BLOCK_KEYS = ("framework", "args", "timeout", "schedule")
BENCH_LISTS = ("pp", "tg", "depth", "concurrency")
NOT_HONOURED_WHY = {
    "defaults": "{value}: the recipe has no command, and sparkrun's flag map for its runtime has no flag for these "
    "(sparkrun leaves them out of the command too): write a command template to pass them",
    "container": "{value}: sparkplay runs llama.cpp from the node's packages, not a container",
    "api_options": "{value}: sparkrun writes these defaults to an LLM API options file it makes and adds "
    "--extra_llm_api_options for it; sparkplay writes no such file: not applied (a trtllm-serve flag carries some: "
    "--kv_cache_free_gpu_memory_fraction, --max_batch_size)",
    "mods": "{value}: not run: sparkplay reads a mod from where sparkrun finds it in a registry checkout; import "
    "the recipe from a checkout of its registry (each mod is then a privileged request), or build an image with "
    "the mods applied and --set engine.image to it",
    "executor_config": "{value}: not applied: sparkplay's engine container is never privileged and has no "
    "capabilities, devices or mounts beyond its own (the GPU, the RDMA devices, IPC_LOCK; docs/security.md)",
    "pre_exec": "{value}: not run",
    "post_exec": "{value}: not run: checks in the leader's container once it answers; sparkplay's own readiness "
    "proof (a completion through the API on every up) stands in for them",
    "post_commands": "{value}: not run: commands on the machine sparkplay runs from; sparkplay runs no recipe "
    "command outside the engine's container",
    "benchmark": "{value}: sparkplay's bench runs llama-benchy with pp, tg, depth, concurrency and runs from the "
    "recipe; these are not taken",
}


def bench_profile(data: dict[str, Any], where: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The recipe's llama-benchy profile from its benchmark block (explicit args, then other keys swept in,
    as sparkrun reads it), and what sparkplay's bench does not take from it."""
    block = data.get("benchmark")
    if not isinstance(block, dict):
        return None, ({"benchmark": block} if block not in (None, {}) else {})
    args = dict(block.get("args") or {}) if isinstance(block.get("args"), dict) else {}
    for key, value in block.items():
        if key not in BENCH_BLOCK_KEYS and key not in args:
            args[key] = value
    framework = str(block.get("framework") or "llama-benchy")
    if framework != "llama-benchy":
        return None, {"benchmark": block}
    profile: dict[str, Any] = {}
    left = {k: block[k] for k in ("timeout", "schedule") if block.get(k) is not None}
    for key, value in args.items():
        values = value if isinstance(value, list) else [value]
        whole = all(
            isinstance(v, int) and not isinstance(v, bool) and v >= (0 if key == "depth" else 1) for v in values
        )
        if key in BENCH_LISTS and values and whole:
            profile[key] = values
        elif key == "runs" and not isinstance(value, list) and whole:
            profile[key] = value
        else:
            left[key] = value
    return profile or None, ({"benchmark": left} if left else {})
