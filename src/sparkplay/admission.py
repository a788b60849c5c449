"""Whether a deployment fits beside what a cluster already serves: each rank's memory claim, and the rule that
admits it or refuses it naming the node, the claims and the shortfall (before anything changes).

A Spark's GPU and CPU share one pool of memory (128 GB, MemTotal about 121 GiB), so an engine's claim is a
claim on the node's memory. How each engine's claim is derived, from the launch plan it will run:

- vLLM preallocates `--gpu-memory-utilization` (its default 0.9) of the memory it sees, weights and KV cache
  inside that budget; SGLang likewise `--mem-fraction-static` (0.88 when unset, its value for a GPU of this
  size); Atlas `--gpu-memory-utilization` or SparkGLM's `SPARKGLM_GPU_MEMORY_UTILIZATION` (0.88). The claim is
  that fraction of the node's MemTotal. The rank's share of the weights must fit inside it, or the engine
  fails at load: that is refused too.
- llama.cpp allocates what it needs: its rank's share of the weights (split evenly over the ranks, as RPC
  splits layers over equal devices) and of the KV cache (`-c` tokens at the model's bytes per token, from the
  GGUF header: 2 x layers x KV heads x head size x 2 bytes for an f16 cache).
- every engine's process holds more beside its budget (a CUDA context, the runtime, compile caches):
  OVERHEAD, an allowance rather than a measurement, stated in each claim.

The rule, per node: a new claim must fit both in MemAvailable (what the node has free now, whatever holds the
rest) less a reserve for the OS, and in MemTotal less the reserve and every claim admitted before (a
deployment admitted but still loading has not taken its memory yet). The override (`force`) admits anyway;
the engine may then fail to allocate, or the node run out of memory and kill a process of another model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline

GIB = 1024**3
# beside an engine's memory budget: its process (CUDA context, Python or C++ runtime, compile caches)
OVERHEAD = {"vllm": 3 * GIB, "sglang": 3 * GIB, "atlas": 3 * GIB, "llamacpp": GIB // 2}
# the memory the node's own system keeps (kernel, sshd, Docker, the watchdog)
RESERVE = 4 * GIB
# (flags, environment names, the engine's default) of each engine whose budget is a fraction of the memory
FRACTION = {
    "vllm": (("--gpu-memory-utilization",), (), 0.9),
    "sglang": (("--mem-fraction-static",), (), 0.88),
    "atlas": (("--gpu-memory-utilization",), ("SPARKGLM_GPU_MEMORY_UTILIZATION",), 0.88),
}


@dataclass(frozen=True)
class Claim:
    """What one deployment holds (or will) on one node, and how that was worked out."""

    recipe: str
    host: str
    bytes: int
    how: str


def kv_per_token(gguf_file: Path, cache_bytes: int = 2) -> int:
    """llama.cpp's KV cache bytes per token of context for a GGUF model (an f16 cache: 2 bytes an element),
    from its header: every layer keeps a key and a value of head size for each KV head."""
    from gguf import GGUFReader  # llama.cpp's own reader; only the header is read (the file is mapped)

    reader = GGUFReader(str(gguf_file))

    def field(key: str) -> Any:
        found = reader.fields.get(key)
        if found is None:
            return None
        value = found.parts[found.data[0]]
        return bytes(value).decode() if found.types and found.types[0].name == "STRING" else int(value[0])

    arch = field("general.architecture")
    layers, heads = field(f"{arch}.block_count"), field(f"{arch}.attention.head_count")
    kv_heads = field(f"{arch}.attention.head_count_kv") or heads
    width = field(f"{arch}.embedding_length")
    if not (arch and layers and heads and width):
        raise BadInput(f"{gguf_file}: its GGUF header lacks the layer or head counts", "use a llama.cpp GGUF file")
    key = field(f"{arch}.attention.key_length") or width // heads
    value = field(f"{arch}.attention.value_length") or width // heads
    return layers * kv_heads * (key + value) * cache_bytes


def gib(count: int) -> str:
    return f"{count / GIB:.1f} GiB"


def _fraction(engine: str, rank: Mapping[str, Any]) -> float:
    flags, env_names, default = FRACTION[engine]
    value = cmdline.flag_value(rank.get("argv") or [], *flags) if flags else None
    for name in env_names:
        value = value or (rank.get("env") or {}).get(name)
    return float(value) if value is not None else default


def claims(
    recipe: str,
    engine: str,
    ranks: Sequence[Mapping[str, Any]],
    mem_total: Mapping[str, int],
    weights: int,
    kv_per_token: int | None = None,
) -> list[Claim]:
    """Each rank's claim on its node. `ranks` are the launch plan's (host, role, argv, env); `weights` the
    checkpoint's bytes in all; `kv_per_token` llama.cpp's KV cache bytes per token of context."""
    if engine not in OVERHEAD:
        raise BadInput(f"no memory claim is known for the {engine} engine", "serve it alone (plain `up`)")
    share = -(-weights // max(len(ranks), 1))  # each rank's part of the weights, rounded up
    found = []
    for rank in ranks:
        host = rank["host"]
        if engine in FRACTION:
            fraction = _fraction(engine, rank)
            budget = int(fraction * mem_total[host])
            if share > budget:
                raise BadInput(f"recipe {recipe}: {host}'s share of the weights ({gib(share)}) is more than the "
                               f"{engine} memory budget there ({fraction} of {gib(mem_total[host])}, {gib(budget)})",
                               "raise the memory fraction, or spread the model over more nodes")  # fmt: skip
            how = (f"{engine} preallocates {fraction} of {gib(mem_total[host])} ({gib(budget)}), plus "
                   f"{gib(OVERHEAD[engine])} for its process")  # fmt: skip
            found.append(Claim(recipe, host, budget + OVERHEAD[engine], how))
            continue
        context = int(cmdline.flag_value(rank.get("argv") or [], "-c", "--ctx-size") or 0) if kv_per_token else 0
        kv = -(-(context * (kv_per_token or 0)) // max(len(ranks), 1))
        how = f"its share of the weights {gib(share)}"
        how += f", of a {context}-token KV cache {gib(kv)}" if kv else ""
        how += f", {gib(OVERHEAD[engine])} for its process"
        found.append(Claim(recipe, host, share + kv + OVERHEAD[engine], how))
    return found


@dataclass(frozen=True)
class Shortfall:
    host: str
    claim: Claim
    admitted: tuple[Claim, ...]
    available: int
    headroom: int

    def line(self) -> str:
        others = ", ".join(f"{c.recipe} {gib(c.bytes)}" for c in self.admitted) or "nothing"
        claim = self.claim
        return (f"{claim.recipe} does not fit on {self.host}: it claims {gib(claim.bytes)} ({claim.how}); "
                f"admitted there: {others}; MemAvailable {gib(self.available)}; short by "
                f"{gib(claim.bytes - self.headroom)}")  # fmt: skip


def shortfalls(
    new: Iterable[Claim],
    admitted: Iterable[Claim],
    available: Mapping[str, int],
    mem_total: Mapping[str, int],
) -> list[Shortfall]:
    """Each node where the new deployment's claim does not fit (empty: it is admitted)."""
    before = list(admitted)
    found = []
    for claim in new:
        there = tuple(c for c in before if c.host == claim.host and c.recipe != claim.recipe)
        promised = mem_total[claim.host] - RESERVE - sum(c.bytes for c in there)
        headroom = min(available[claim.host] - RESERVE, promised)
        if claim.bytes > headroom:
            found.append(Shortfall(claim.host, claim, there, available[claim.host], headroom))
    return found


def admit(
    new: Sequence[Claim],
    admitted: Iterable[Claim],
    available: Mapping[str, int],
    mem_total: Mapping[str, int],
    force: bool = False,
) -> list[str]:
    """Refuse (BadInput, one line per node) a deployment that does not fit, unless forced; the lines the
    override let through otherwise (a warning to show)."""
    short = shortfalls(new, admitted, available, mem_total)
    if short and not force:
        raise BadInput(
            "; ".join(s.line() for s in short) + ". Nothing was changed",
            "stop a deployment (sparkplay stop NAME), choose a smaller recipe, or admit it anyway with --force-admit "
            "(the engine may fail to allocate, or the node run out of memory and kill another model's process)",
        )
    return [s.line() for s in short]
