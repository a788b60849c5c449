"""Whether a deployment fits beside what a cluster already serves: each rank's memory claim, and the rule that
admits it or refuses it naming the node, the claims and the shortfall (before anything changes).

A Spark's GPU and CPU share one pool of memory (128 GB, MemTotal about 121 GiB), so an engine's claim is a
claim on the node's memory. How each engine's claim is derived, from the launch plan it will run:

- vLLM preallocates `--gpu-memory-utilization` (its default 0.9) of the memory it sees, weights and KV cache
  inside that budget; SGLang likewise `--mem-fraction-static` (0.88 when unset, its value for a GPU of this
  size); Atlas `--gpu-memory-utilization` or SparkGLM's `SPARKGLM_GPU_MEMORY_UTILIZATION` (0.88). The claim is
  that fraction of the node's MemTotal. The rank's share of the weights must fit inside it, or the engine
  fails at load: that is refused too.
- vLLM's CPU build (the native runtime; the lab's) holds its rank's share of the weights and the KV cache
  VLLM_CPU_KVCACHE_SPACE names (GiB; 4 when unset, its CPU worker's default).
- llama.cpp allocates what it needs: its rank's share of the weights (split evenly over the ranks, as RPC
  splits layers over equal devices) and of the KV cache (`-c` tokens at the model's bytes per token, from the
  GGUF header: 2 x layers x KV heads x head size x 2 bytes for an f16 cache).
- every engine's process holds more beside its budget (a CUDA context, the runtime, compile caches): its
  spec's overhead_bytes, an allowance rather than a measurement, stated in each claim.

Each engine's package works its claim out (its spec's `claim`); this module adds them up and admits.

The rule, per node: a new claim must fit both in MemAvailable (what the node has free now, whatever holds the
rest) less a reserve for the OS, and in MemTotal less the reserve and every claim admitted before (one still
loading has not taken its memory yet). The override (`force`) admits anyway; the engine may then fail to
allocate, or the node run out of memory and kill a process of another model."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkplay.engines import names, registry
from sparkplay.engines.spec import GIB, Holding, gib
from sparkplay.errors import BadInput
from sparkplay.kvcache import kv_bytes_per_token

# the memory the node's own system keeps (kernel, sshd, Docker, the watchdog)
RESERVE = 4 * GIB


@dataclass(frozen=True)
class Claim:
    """What one deployment holds (or will) on one node, and how that was worked out."""

    recipe: str
    host: str
    bytes: int
    how: str


def claims(
    recipe: str,
    engine: str,
    ranks: Sequence[Mapping[str, Any]],
    mem_total: Mapping[str, int],
    weights: int,
    kv_per_token: int | None = None,
    runtime: str = "docker",
) -> list[Claim]:
    """Each rank's claim on its node. `ranks` are the launch plan's (host, role, argv, env); `weights` the
    checkpoint's bytes in all; `kv_per_token` llama.cpp's KV cache bytes per token of context."""
    spec = registry.spec(engine)  # an engine sparkplay does not know is refused, naming those it does
    lead = next((r for r in ranks if r.get("role") == "leader"), ranks[0] if ranks else {})
    share = -(-weights // max(len(ranks), 1))  # each rank's part of the weights, rounded up
    found = []
    for rank in ranks:
        holding = Holding(recipe, lead, share, mem_total[rank["host"]], len(ranks), kv_per_token, runtime)
        claimed, how = spec.claim(rank, holding)
        found.append(Claim(recipe, rank["host"], claimed, how))
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
        return (
            f"{claim.recipe} does not fit on {self.host}: it claims {gib(claim.bytes)} ({claim.how}); "
            f"admitted there: {others}; MemAvailable {gib(self.available)}; short by "
            f"{gib(claim.bytes - self.headroom)}"
        )


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


def meminfo(text: str) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes from /proc/meminfo's text."""
    found = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if name in ("MemTotal", "MemAvailable") and words and words[0].isdigit():
            found[name] = int(words[0]) * (1024 if words[1:2] == ["kB"] else 1)
    if len(found) != 2:
        raise BadInput("/proc/meminfo names no MemTotal or MemAvailable", "run on Linux 3.14 or later")
    return found["MemTotal"], found["MemAvailable"]


def _port(url: str) -> int | None:
    tail = str(url).rsplit(":", 1)[-1].split("/")[0]
    return int(tail) if tail.isdigit() else None


def decide(
    launch: Mapping[str, Any],
    hosts: Mapping[str, Mapping[str, Any]],
    found: Sequence[Mapping[str, Any]],
    force: bool = False,
    gateway: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Admit the launch plan `launch` (stage two's) beside the deployments whose records are `found`
    (served.records: each with its host), or refuse it (BadInput). `hosts`: host -> {meminfo:
    /proc/meminfo's text, weights: the checkpoint's bytes there, gguf: llama.cpp's header fields or None}, for
    every node (the model's files may be on rank 0 alone before the mirror). Returns each of its ranks' claim
    {host: {bytes, how}} (kept in the rank's record for the next admission) and the warnings an override let
    through. `gateway`: the gateway's (host, port), which no API may take, and the watchdogs' metrics port
    (0: none), which no rank of any deployment may take on any node.
    The primary with nothing beside it is not checked (one-model users see what they saw): its claim is still
    worked out where it can be, for what is added later."""
    slot, recipe, engine = launch.get("slot"), launch["recipe"], launch["engine"]
    leader = next(r["host"] for r in launch["ranks"] if r["role"] == "leader")
    here = {r["host"] for r in launch["ranks"]}
    others: dict[tuple[str, Any], Claim] = {}
    freed = dict.fromkeys(here, 0)
    wanted_ports: dict[str, set[int]] = {}
    for rank in launch["ranks"]:
        wanted_ports.setdefault(rank["host"], set()).update(rank.get("record", {}).get("ports") or [])
    for record in found:
        host, claim = record["host"], record.get("claim") or {}
        if record.get("slot") == slot:  # this deployment's own: its memory comes back when it restarts
            if host not in here:  # elsewhere: a second copy would leave the first running, unrouted
                name = record.get("recipe")
                raise BadInput(
                    f"{name} is served on {host}, not where this run places it",
                    f"stop it first (sparkplay stop {name}), then add it on the other node",
                )
            freed[host] = max(freed[host], int(claim.get("bytes") or 0))
            continue
        owner = f"recipe {record.get('recipe')} ({'added' if record.get('slot') else 'primary'})"
        # a deployment and its stand-in (engines/names.py) serve one model while it is updated: the same recipe
        # and served name, their own ports, and both claims counted
        twin = _twins(slot, record.get("slot"))
        if record.get("recipe") == recipe and not twin:
            raise BadInput(
                f"{recipe} is already served on {host} as {owner}",
                "run the same command it was started with to redeploy it, or stop it first",
            )
        leads = record.get("role") == "leader"  # the gateway routes by served name; its default names one or a recipe
        clash = sorted({launch["served_name"], recipe} & {record.get("served_name"), record.get("recipe")} - {None})
        if leads and clash and not twin:
            raise BadInput(
                f"served name {clash[0]} is already {owner}'s (its served name or recipe): the gateway routes by name",
                "give the recipe another model.served_name, or stop the other",
            )
        if leads and host == leader and _port(record.get("api_url", "")) == launch["api"]["port"]:
            raise BadInput(
                f"port {launch['api']['port']} on {host} is {owner}'s API",
                "choose another port (sparkplay up --port N, or -e serve_port=N)",
            )
        taken = set(record.get("ports") or []) & wanted_ports.get(host, set())
        if taken:
            raise BadInput(
                f"port {min(taken)} on {host} is {owner}'s (its API or where its ranks meet)",
                "choose another API port (sparkplay up --port N): an added deployment's ranks meet on "
                "the ports after it",
            )
        if claim.get("bytes") and not record.get("on_demand"):  # on demand: the gateway keeps those within budget
            # (a twin is named apart: a claim of the recipe being admitted would be taken for its own)
            label = (
                f"{record.get('recipe')} ({'its stand-in' if names.stands_in_for(record.get('slot')) else 'running'})"
            )
            others[(host, record.get("slot"))] = Claim(
                label if twin else str(record.get("recipe")), host, int(claim["bytes"]), str(claim.get("how", ""))
            )
    if gateway and (leader, launch["api"]["port"]) == (gateway[0], int(gateway[1])):
        raise BadInput(f"port {gateway[1]} on {leader} is the gateway's", "choose another port (sparkplay up --port N)")
    metrics = int(gateway[2]) if gateway and len(gateway) > 2 and gateway[2] else 0
    for host, ports in sorted(wanted_ports.items()):
        if metrics and metrics in ports | ({launch["api"]["port"]} if host == leader else set()):
            raise BadInput(
                f"port {metrics} on {host} is the watchdog's metrics port (serve_watchdog_metrics_port)",
                "choose another API port (sparkplay up --port N; a stand-in listens 1000 above its deployment's)",
            )
    checking = slot is not None or any(c.host in here for c in others.values())
    memory = {h: meminfo(hosts[h]["meminfo"]) for h in here}
    totals = {h: memory[h][0] for h in here}
    available = {h: min(memory[h][0], memory[h][1] + freed[h]) for h in here}
    # the checkpoint's bytes and header wherever they are already (rank 0 holds them before the mirror)
    weights = max(int(facts.get("weights") or 0) for facts in hosts.values())
    headers = [hosts[leader].get("gguf"), *(facts.get("gguf") for facts in hosts.values())]
    header = next((h for h in headers if h), None) if registry.spec(engine).kv_from_header else None
    ranks = [{"host": r["host"], "role": r["role"], "argv": r["argv"], "env": r["env"]} for r in launch["ranks"]]
    stated = launch.get("memory_claim")
    try:
        if stated:  # the inventory or the recipe says what each rank holds: the limit reads the same number
            new = [Claim(recipe, h, int(stated["bytes"]), str(stated["how"])) for h in sorted(here)]
        else:
            per_token = kv_bytes_per_token(header, where=f"{leader}'s model") if header else None
            new = claims(recipe, engine, ranks, totals, weights, per_token, launch.get("runtime", "docker"))
    except BadInput:
        if checking:
            raise
        return {"claims": {}, "warnings": [], "checked": False}
    warnings = admit(new, others.values(), available, totals, force) if checking else []
    return {
        "claims": {c.host: {"bytes": c.bytes, "how": c.how} for c in new},
        "warnings": warnings,
        "checked": checking,
    }


def _twins(slot: Any, other: Any) -> bool:
    """Whether two slots are a deployment and its stand-in."""
    if not slot or not other or slot == other:
        return False
    return (names.stands_in_for(slot) or slot) == (names.stands_in_for(other) or other)


def verdict(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """decide (its arguments), with a refusal as {"refused": the one line} for the serve role's own failure
    message."""
    try:
        return decide(*args, **kwargs)
    except BadInput as refused:
        return {"refused": str(refused), "claims": {}, "warnings": [], "checked": True}


# The memory limit each engine runs under: its claim plus this share of it (never less than MIN_HEADROOM),
# so an engine that outgrows what admission counted is killed by its cgroup before it takes a neighbour's
# memory, while the allowance's estimate (a CUDA context, a runtime) may be off by this much. MemoryHigh,
# where the kernel starts reclaiming the engine's own cache hard, is the claim itself.
HEADROOM_PERCENT = 10
MIN_HEADROOM = 256 * 2**20


def memory_limit(claim: Mapping[str, Any] | None) -> dict[str, int] | None:
    """{max, high} bytes for an engine whose rank claims `claim` ({bytes, how}); None: no claim is known."""
    if not claim or not claim.get("bytes"):
        return None
    held = int(claim["bytes"])
    return {"max": held + max(held * HEADROOM_PERCENT // 100, MIN_HEADROOM), "high": held}


MAX_CLAIM_GIB = 1 << 20  # a PiB: beyond any node; a larger number is a typo or an attack, not a claim


def stated_claim(recipe: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The claim each rank makes on its node when the inventory or the recipe states one (GiB), in place of
    the one admission derives: admission and the engine's memory limit read this same number."""
    stated = (
        (settings.get("serve_memory_claim_gib"), "the inventory's serve_memory_claim_gib"),
        ((recipe.get("serve") or {}).get("memory_claim_gib"), "the recipe's serve.memory_claim_gib"),
    )
    for value, where in stated:
        if value not in (None, 0, "0", ""):
            try:
                gib = float(value)
            except (TypeError, ValueError):
                gib = -1.0
            if not math.isfinite(gib) or gib <= 0 or gib > MAX_CLAIM_GIB:  # nan and inf pass a schema's minimum
                raise BadInput(
                    f"{where} is {value!r}",
                    f"give GiB above 0 and at most {MAX_CLAIM_GIB} (0: the claim sparkplay works out)",
                )
            return {"bytes": int(gib * 2**30), "how": f"{gib:g} GiB as {where} says"}
    return None
