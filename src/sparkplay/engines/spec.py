"""What one engine is, to everything outside its package: the recipe side of an engine.

Each engine is a package under `sparkplay/engines/` holding a `spec` module (a `SPEC`, an `EngineSpec`: how
its command lines are recognised and its flags read, its defaults, images, packages, environment names, model
source, memory claim) and a `plan` module (`plan(ctx)`: its per-rank launch). The rest of sparkplay asks
`sparkplay.engines.registry` and never names an engine (tests/test_engine_registry.py holds that).

This module and each package's `spec` sit low in the import layers (beside the small rules) because the
recipe formats read them; they import nothing above `sparkplay.argv`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sparkplay import argv
from sparkplay.errors import BadInput

GIB = 1024**3

# what a rule says about a field as it reads (field, kind, text): the recipe's provenance
Note = Callable[[str, str, str], None]

# the fields an engine's flags can state (derive's keys; the Recipe's names)
DERIVED = (
    "context_length",
    "tensor_parallel",
    "pipeline_parallel",
    "expert_parallel",
    "nodes",
    "gpu_memory_utilization",
    "port",
    "bind",
    "served_name",
)


@dataclass(frozen=True)
class Defaults:
    """What a recipe of this engine leaves unsaid and sparkplay fills (marked `filled` in its provenance)."""

    runtime: str
    port: int
    health_timeout_s: int
    image_repository: str | None = None
    # the image a recipe that names none runs in (a bare `vllm serve` line, a script that runs the engine from a
    # virtualenv): a pinned tag of the image the engine's DGX Spark guide uses, and where that guide is, said in
    # the import's note
    image: str | None = None
    image_from: str = ""
    packages: tuple[str, ...] = ()
    # knobs the engine's launcher exposes, at their defaults
    knobs: dict[str, Any] = field(default_factory=dict)
    # settings a recipe's prose names that are really a knob's doing: they leave serve.env and the knob
    # governs them (docs/serving.md, Atlas knobs)
    knob_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KnownModel:
    """A model sparkplay has facts for, recognised by its engine plus one identifying flag ("model": the
    recipe's model)."""

    label: str
    engine: str
    match_flag: str
    match_value: str
    fills: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fraction:
    """An engine whose memory budget is a fraction of the node's memory, preallocated at start."""

    flags: tuple[str, ...]
    env: tuple[str, ...]
    default: float


@dataclass(frozen=True)
class Holding:
    """What a rank's memory claim is worked out from, beside its launch plan."""

    recipe: str
    leader: Mapping[str, Any]  # the leader rank's launch plan (argv, env)
    share: int  # this rank's part of the checkpoint's bytes
    total: int  # the node's memory
    ranks: int
    kv_per_token: int | None  # KV cache bytes per token of context, where the model's header says
    runtime: str


class EngineSpec:
    """One engine's facts and rules; a subclass per engine sets what differs from these defaults."""

    name: ClassVar[str]  # its package's name
    title: ClassVar[str]  # as people write it (vLLM, llama.cpp)
    command_help: ClassVar[str]  # how its serve command is written, for the error naming no known engine
    defaults: ClassVar[Defaults]

    def __init_subclass__(cls, *, name: str, title: str, command: str, **kwargs: Any) -> None:
        """An engine's identity, given where its class is declared: `class Vllm(EngineSpec, name="vllm", ...)`."""
        super().__init_subclass__(**kwargs)
        cls.name, cls.title, cls.command_help = name, title, f"{name} ({command})"

    # the context length's flags; the first is the one sparkplay writes where a recipe's flags leave it out
    context_flags: ClassVar[tuple[str, ...]] = ()
    # what a flag states, by field (derive's generic reading: integers, the fraction a float, names as given)
    field_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    # image repositories trusted unless the inventory says otherwise (`ORG/*`: every one under ORG)
    images: ClassVar[tuple[str, ...]] = ()
    # the Debian packages its native runtime needs (what its plan runs): a recipe's others are requests
    native_packages: ClassVar[re.Pattern[str] | None] = None
    # environment names its documentation lists as plain tuning, and prefixes whose every name is its own
    plain_env: ClassVar[frozenset[str]] = frozenset()
    plain_env_prefixes: ClassVar[tuple[str, ...]] = ()
    # beside its memory budget: its process (CUDA context, runtime, compile caches)
    overhead_bytes: ClassVar[int] = 3 * GIB
    memory_fraction: ClassVar[Fraction | None] = None
    folder_model: ClassVar[bool] = False  # serves model.path as a folder (not a file)
    serves_local_path: ClassVar[bool] = False  # can serve model.path under the model root with no repository
    native_self_installed: ClassVar[bool] = False  # its native program is installed by its plan, not a package
    nodes_from_flags: ClassVar[bool] = False  # a command of it that states no node count runs on one node
    revision_flag: ClassVar[str | None] = None  # the flag pinning the hub revision
    api_key_env: ClassVar[str | None] = None  # the variable it reads its API key from
    knobs_read: ClassVar[frozenset[str] | None] = frozenset()  # None: every knob the schema names
    added_flags: ClassVar[Mapping[str, str]] = {}  # flags its plan adds where the recipe has not, and why
    models: ClassVar[tuple[KnownModel, ...]] = ()
    families: ClassVar[tuple[str, ...]] = ()  # its image families (family() says which a recipe's is)
    ready_timeout_env: ClassVar[str | None] = None  # a variable of the recipe's that says how long a start may take
    served_name_flags: ClassVar[tuple[str, ...]] = ()  # the flag(s) naming what it serves the model as
    # flags of its server that no other engine sparkplay knows spells: flags given alone (a compose `command:`
    # on an image sparkplay does not know, a profile's arguments) say the engine by them (registry.by_flags)
    own_flags: ClassVar[frozenset[str]] = frozenset()
    # flags other engines spell too that, given alone with no engine's own flag, are read as this one's
    claimed_flags: ClassVar[frozenset[str]] = frozenset()
    program: ClassVar[tuple[str, ...]] = ()  # its serve program's words before its flags
    # how people write its name in a variable's (VLLM_ARGS) or an image's (vllm/vllm-omni) name
    spellings: ClassVar[tuple[str, ...]] = ()
    # the flags a multi-node guide gives each node's command, which its plan sets per rank itself
    per_rank: ClassVar[tuple[str, ...]] = ()
    model_is_file: ClassVar[bool] = False  # its model argument is always a file (never a hub repository)
    kv_from_header: ClassVar[bool] = False  # its KV cache per token is read from the model file's header (GGUF)
    answers_exact: ClassVar[bool] = False  # its greedy answer to one request is the same across restarts

    def command_words(self, model: str) -> list[str]:
        """Its serve command for MODEL, before its flags, for a text that gives the flags and the model apart (a
        profile of settings)."""
        return [*self.program, model]

    def recognise(self, program: str, rest: Sequence[str]) -> tuple[str | None, list[str]] | None:
        """(its model, its flags) when `program rest...` is this engine's serve command, else None."""
        return None

    def launcher(self, words: Sequence[str]) -> int:
        """How many leading words of a command are this engine's own multi-node launcher around its server
        (TensorRT-LLM's `mpirun ... trtllm-llmapi-launch`): sparkplay writes its own, so they are read past."""
        return 0

    def context_value(self, text: str) -> int | None:
        """The context length the engine reads from its flag's text; None where it sizes it itself."""
        value = text.strip()
        if value.isdigit():
            return int(value)
        flag = self.context_flags[0] if self.context_flags else "the context flag"
        raise BadInput(
            f"{flag} has a value the engine does not read: {text!r}", f"give {flag} a whole number of tokens"
        )

    def context(self, args: Sequence[str], note: Note) -> int | None:
        text = argv.flag_value(args, *self.context_flags) if self.context_flags else None
        if text is None:
            return None
        value = self.context_value(text)
        if value is None:
            note(
                "context_length",
                "derived",
                f"{self.context_flags[0]} {text}: the engine sizes the context to the memory it has at start, "
                "so the recipe states no length",
            )
        return value

    def derive(self, args: Sequence[str], note: Note) -> dict[str, Any]:
        """Context, topology, memory, port, bind and served name as the engine's flags state them."""
        found: dict[str, Any] = dict.fromkeys(DERIVED)
        found["context_length"] = self.context(args, note)
        for name, flags in self.field_flags.items():
            text = argv.flag_value(args, *flags)
            if name in ("bind", "served_name"):
                found[name] = text
            elif name == "gpu_memory_utilization":
                found[name] = argv.number(text, flags[0])
            else:
                found[name] = argv.whole(text, flags[0])
        return found

    def speculative(self, args: Sequence[str], note: Note) -> dict[str, Any] | None:
        """Its speculative decoding as {method, num_tokens, draft_model}; None: off."""
        return None

    def aliases(self, args: Sequence[str]) -> list[str]:
        """The names it answers to beside the served name."""
        return []

    def family(self, args: Sequence[str], image: str | None, note: Note) -> str | None:
        """Its image family, where its images start their ranks in more than one way."""
        return None

    def serves_model_argument(self, family: str | None) -> bool:
        """Whether, given no served-name flag, it serves the model as its model argument as written."""
        return True

    def unnamed(self, recipe_name: str | None) -> str | None:
        """What the import says where the recipe gives no served name and the engine does not use the model
        argument (None: nothing to say)."""
        return None

    def reads_knobs(self, family: str | None) -> bool:
        """Whether this family's images read the knobs in `defaults.knobs` (its launcher's profile)."""
        return True

    def left_out(self, args: Sequence[str], note: Note) -> list[str]:
        """Its flags with what it cannot serve or sparkplay cannot carry left out, each said (SGLang's second
        served name, a file on the author's machine)."""
        return list(args)

    def hub_model(self, args: Sequence[str]) -> str | None:
        """The hub repository a flag of its downloads the model from (None: its model argument says)."""
        return None

    def gguf(
        self, args: Sequence[str], model: str | None, repo: str | None, quant: str | None
    ) -> dict[str, Any] | None:
        """What a GGUF served from the hub names, to be resolved at import into files (None: not such a model)."""
        return None

    def unused_draft(self, args: Sequence[str], speculative: Mapping[str, Any] | None) -> tuple[str, str] | None:
        """(a draft model the flags name but the engine will not use, why): mirrored all the same."""
        return None

    def spelled(self, args: Sequence[str]) -> list[str]:
        """Each flag written as its parser reads it, so every rule sees the flag."""
        return list(args)

    def plain(self, name: str, path_shaped: Callable[[str], bool]) -> bool:
        """Whether environment `name` is its plain tuning."""
        return name in self.plain_env or (name.startswith(self.plain_env_prefixes) and not path_shaped(name))

    def refused_twin(self, name: str) -> str | None:
        """Why `name` is refused as the environment twin of a flag sparkplay owns or confines (None: it is not)."""
        return None

    def claim(self, rank: Mapping[str, Any], holding: Holding) -> tuple[int, str]:
        """(bytes, how) this rank holds on its node."""
        overhead, share, total = self.overhead_bytes, holding.share, holding.total
        if self.memory_fraction is None:
            return share + overhead, f"its share of the weights {gib(share)}, {gib(overhead)} for its process"
        fraction = self._fraction(self.memory_fraction, rank)
        budget = int(fraction * total)
        if share > budget:
            raise BadInput(
                f"recipe {holding.recipe}: {rank['host']}'s share of the weights ({gib(share)}) is more than the "
                f"{self.name} memory budget there ({fraction} of {gib(total)}, {gib(budget)})",
                "raise the memory fraction, or spread the model over more nodes",
            )
        how = (
            f"{self.name} preallocates {fraction} of {gib(total)} ({gib(budget)}), plus {gib(overhead)} for its process"
        )
        return budget + overhead, how

    @staticmethod
    def _fraction(spec: Fraction, rank: Mapping[str, Any]) -> float:
        value = argv.flag_value(rank.get("argv") or [], *spec.flags) if spec.flags else None
        for name in spec.env:
            value = value or (rank.get("env") or {}).get(name)
        return float(value) if value is not None else spec.default


def gib(count: int) -> str:
    """Bytes for a person: GiB, or MiB below one GiB (a lab's tiny model would read 0.0 GiB)."""
    return f"{count / GIB:.1f} GiB" if abs(count) >= GIB else f"{count / 2**20:.1f} MiB"


def split_model(tokens: Sequence[str]) -> tuple[str | None, list[str]]:
    """A leading positional model, and the flags after it."""
    if tokens and not tokens[0].startswith("-"):
        return tokens[0], list(tokens[1:])
    return None, list(tokens)
