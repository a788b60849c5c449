"""What in a recipe makes an engine load code or move where it keeps code: its environment and its flags.

The boundary (boundary.py) asks this module three questions of a recipe:

- which environment names it may set without asking: one allow-list for every runtime, native or container,
  the plain tuning names the engines document (each engine's own in its package's spec: llama.cpp's and
  ggml's README and common/arg.cpp, vLLM's envs.py; here NCCL's and OpenMP's environment pages), read for
  these lists. Any other name is a privileged
  request `env:NAME`: a block list keeps missing names (NCCL_NET_PLUGIN, HOME, VLLM_LOGGING_CONFIG_PATH,
  then CUDA_INJECTION64_PATH, TRITON_HOME, OMP_TOOL_LIBRARIES and inductor's remote caches in containers
  were all missed by one). A container is no reason for less: the loader there loads code into the same
  engine, from the image and the mounts (the checkpoint among them);
- which names are the environment twin of a flag sparkplay owns or confines (llama.cpp reads LLAMA_ARG_RPC
  as --rpc, LLAMA_ARG_LORA as --lora): those are refused like the flags, in every runtime, with the flag as
  the fix (a flag goes through every rule; its twin would pass around them);
- which flags import Python by path or module name, or run the checkpoint's own code. They are shown at
  import as what they are; a plugin file outside the checkpoint and the image is a privileged request.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sparkplay.engines import registry

# glibc's list of variables ld.so ignores for setuid programs (elf/dl-unsecvars.h, read 2.40), because
# each changes what code or data a program loads
GLIBC_UNSECURE = frozenset(
    {
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TMPDIR",
        "TZDIR",
    }
)
# what the shells, interpreters and TLS stacks the engines run read to load code or trust
LOADER_NAMES = GLIBC_UNSECURE | frozenset(
    {
        "PATH",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "IFS",
        "CDPATH",
        "PROMPT_COMMAND",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        "OPENSSL_CONF",
        "OPENSSL_ENGINES",
        "OPENSSL_MODULES",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        # torch/triton run or load compiled code from these places
        "TORCH_EXTENSIONS_DIR",
        "TRITON_CACHE_DIR",
        "TRITON_PTXAS_PATH",
        "TRITON_CUOBJDUMP_PATH",
        "TRITON_NVDISASM_PATH",
        "TRITON_LIBCUDA_PATH",
        "TORCHINDUCTOR_CACHE_DIR",
        "VLLM_PLUGINS",
    }
)
# every name with these prefixes: the dynamic loader (ld.so(8): LD_*), Python (python(1): PYTHONPATH,
# PYTHONSTARTUP, PYTHONHOME, PYTHONWARNINGS imports a category's module ...), Perl, Ruby, Node, bash's
# exported functions, macOS's loader
LOADER_PREFIXES = ("LD_", "PYTHON", "PERL", "RUBY", "NODE_", "BASH_FUNC_", "DYLD_")


def loads_code(name: str) -> bool:
    """Whether an environment name changes how programs load code, libraries or trust."""
    if name in LOADER_NAMES:
        return True
    if name.startswith("PYTHON"):
        return name not in PYTHON_PLAIN
    return name.startswith(LOADER_PREFIXES)


# names that load code, or move where an engine keeps code it will load again (caches of compiled or
# downloaded code, plugin paths, a logging config that may call any callable): a request in every runtime
CODE_NAMES = frozenset(
    {
        "NCCL_NET_PLUGIN",
        "NCCL_TUNER_PLUGIN",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_ENV_PLUGIN",
        "NCCL_CONF_FILE",
        "NCCL_TOPO_FILE",
        "NCCL_GRAPH_FILE",
        "NCCL_DEBUG_FILE",
        "NCCL_TOPO_DUMP_FILE",
        "NCCL_GRAPH_DUMP_FILE",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_CACHE_ROOT",
        "VLLM_CONFIG_ROOT",
        "VLLM_ASSETS_CACHE",
        "VLLM_XLA_CACHE_PATH",
        "VLLM_TORCH_PROFILER_DIR",
        "VLLM_ALLOW_INSECURE_SERIALIZATION",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "VLLM_SERVER_DEV_MODE",
        "VLLM_RPC_BASE_PATH",
        "HOME",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_RUNTIME_DIR",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_MODULES_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "TRANSFORMERS_CACHE",
        "TORCH_HOME",
        "CUDA_CACHE_PATH",
        "GGML_BACKEND_PATH",
        "GGML_BACKEND_DIR",
        "SGLANG_PLUGINS",
    }
)
# a name of this shape names a place or a plugin: a request whatever the engine and the runtime
PATH_SHAPED = re.compile(r"(PLUGINS?|_PATH|_DIR|_FILE|_ROOT|_HOME|_CACHE|_PREFIX)(_[A-Z0-9]+)?\Z")

# Python's variables that only tune the interpreter and load nothing
PYTHON_PLAIN = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONFAULTHANDLER",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONNOUSERSITE",
        "PYTHONSAFEPATH",
        "PYTHONOPTIMIZE",
    }
)
# the plain names an engine on the host may be given without asking
COMMON_PLAIN = PYTHON_PLAIN | frozenset(
    {
        "OMP_NUM_THREADS",
        "OMP_PROC_BIND",
        "OMP_PLACES",
        "OMP_WAIT_POLICY",
        "OMP_DYNAMIC",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_MODULE_LOADING",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_CACHE_DISABLE",
        "NCCL_DEBUG",
        "NCCL_DEBUG_SUBSYS",
        "NCCL_IB_HCA",
        "NCCL_IB_DISABLE",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_SHM_DISABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_PROTO",
        "NCCL_ALGO",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_IGNORE_CPU_AFFINITY",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
        "TOKENIZERS_PARALLELISM",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "TORCH_NCCL_BLOCKING_WAIT",
        "TORCH_CUDA_ARCH_LIST",
        "CUTE_DSL_ARCH",
        "DO_NOT_TRACK",
        "LANG",
        "LC_ALL",
        "TZ",
    }
)
# flags that make an engine run code that is not its own: name -> what it does (shown at import)
CODE_FLAGS = {
    "--trust-remote-code": "runs the Python the checkpoint ships (its modeling code) inside the engine",
    "--tool-parser-plugin": "imports the Python file {value} into the engine",
    "--reasoning-parser-plugin": "imports the Python file {value} into the engine",
    "--worker-extension-cls": "imports the Python class {value} into every worker",
    "--logits-processors": "imports the Python logits processor(s) {value} into the engine",
    "--middleware": "imports the Python middleware {value} into the API server",
    "--logits-processor-pattern": "lets API callers load Python logits processors matching {value}",
    "--allowed-local-media-path": "lets API callers read files under {value}",
    "--custom_module_dirs": "imports the Python modules in {value} into the engine",
}
# of those, the ones that name a file: outside the checkpoint (and, in a container, the image) a request
PLUGIN_FILES = ("--tool-parser-plugin", "--reasoning-parser-plugin", "--custom_module_dirs")


def refused_twin(name: str) -> str | None:
    """Why `name` is refused as the environment twin of a flag sparkplay owns or confines, or None (whatever
    the engine: a twin means nothing to the others)."""
    return next((why for spec in registry.specs().values() if (why := spec.refused_twin(name))), None)


def plain(engine: str, name: str) -> bool:
    """Whether `name` is plain tuning for `engine` (the allow-list, the same in every runtime)."""
    return name in COMMON_PLAIN or registry.spec(engine).plain(name, lambda n: PATH_SHAPED.search(n) is not None)


def env_requests(engine: str, runtime: str, env: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(name, what it does) for each environment name that is a privileged request: one rule whatever the
    runtime (`runtime` only words where a named place is)."""
    where = "on the host" if runtime == "native" else "in the engine's container (its image and mounts)"
    for name in sorted(env):
        if loads_code(name):
            yield name, "sets a variable that changes what code the engine loads"
        elif name in CODE_NAMES or "PLUGIN" in name:
            yield name, "sets a variable that makes the engine load code from, or keep code in, a place it names"
        elif PATH_SHAPED.search(name):
            yield name, f"sets a variable naming a place {where}, which the engine may read code from"
        elif not plain(engine, name):
            yield name, f"sets a variable the {engine} engine's documentation does not list as plain tuning"


def code_flags(args: Sequence[str]) -> Iterator[tuple[str, str | None]]:
    """(flag, its value or None) for each flag of CODE_FLAGS the arguments give."""
    for i, token in enumerate(args):
        flag, equals, value = str(token).partition("=")
        if flag in CODE_FLAGS:
            following = str(args[i + 1]) if i + 1 < len(args) else None
            if not equals:
                value = following if following is not None and not following.startswith("-") else ""
            yield flag, value or None
