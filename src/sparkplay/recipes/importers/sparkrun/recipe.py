"""Importer for sparkrun recipes (the YAML of spark-arena's recipe registries, `recipe_version` 1 to 4).

The format (sparkrun's "Recipe Format" page): `model`, `model_revision`,
`runtime`, `container`, `min_nodes`/`max_nodes` (or the older `mode`,
`solo_only`, `cluster_only`), `defaults` (every key a `{placeholder}` of the
`command` template), `env`, `metadata`, and launcher features: `mods`,
`pre_exec`, `builder`, `build_args`, `executor_config`, ...

What sparkplay does with each: the command template is expanded from the
defaults and read like any other engine command line; a recipe without a
command gets the engine's command built from its defaults through the
runtime's flag map (as sparkrun itself does); node limits become the node
count; `distribution_config` models and `draft_model` become checkpoints.
What sparkplay cannot honour (mods, pre/post exec, build args, executor
settings other than shared memory) is kept under `extra.sparkrun_not_honoured`
and reported by the import, never dropped in silence.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from sparkplay import argv
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline, hooks, mods
from sparkplay.recipes.importers.sparkrun import executor as sparkrun_executor
from sparkplay.recipes.importers.sparkrun import notes
from sparkplay.recipes.importers.sparkrun import rules as sparkrun_rules
from sparkplay.recipes.importers.sparkrun.fields import (
    COMMAND_HINTS,
    NOT_HONOURED,
    READ,
    RUNTIMES,
    bench_profile,
)
from sparkplay.recipes.importers.sparkrun.flags import api_options, generated_flags
from sparkplay.recipes.importers.sparkrun.template import VERSIONS, collapse_escapes, expand, parse_command, reads_as
from sparkplay.recipes.model import slugify
from sparkplay.recipes.raw import RawRecipe

SHELL_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*")


def is_sparkrun(data: Any) -> bool:
    """A mapping that reads as a sparkrun recipe: its version key, or a model with its container or its runtime
    (sparkrun's Recipe needs model and runtime; recipe_version defaults to 2 and the container to the runtime's
    image for the platform)."""
    return (
        isinstance(data, dict)
        and "schema" not in data
        and "services" not in data
        and ("recipe_version" in data or ("model" in data and ("container" in data or "runtime" in data)))
    )


def _text(data: dict[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise BadInput(f"{where}: {key} must be text, got {type(value).__name__}", f"fix {key}")
    return str(value)


def _positive(data: dict[str, Any], key: str, where: str, what: str) -> int | None:
    """data[key] as a whole number of 1 or more (None when absent); `what` names it in the error."""
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(
            f"{where}: {what} must be a whole number{' of nodes' if what == key else ''} (1 or more), got {value!r}",
            f"fix {key}",
        )
    return value


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _generated_command(engine: str, model: str, defaults: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The engine's command line from the defaults alone, as sparkrun builds it for a recipe without one
    (sparkrun_flags: its flag maps); and the keys it has no flag for."""
    args, unmapped = generated_flags(engine, defaults)
    if engine == "vllm":
        return ["vllm", "serve", model, *args], unmapped
    if engine == "llamacpp":
        return ["llama-server", *args], unmapped
    if engine == "sglang":
        return ["python3", "-m", "sglang.launch_server", "--model-path", model, *args], unmapped
    if engine == "trtllm":  # sparkrun names the PyTorch back end when the defaults name none
        return ["trtllm-serve", model, *([] if defaults.get("backend") else ["--backend", "pytorch"]), *args], unmapped
    return ["spark", "serve", model, *args], unmapped


def _vllm_backend(
    engine: str, args: list[str], backend: str | None, defaults: dict[str, Any], templated: bool, nodes: int
) -> tuple[list[str], str | None]:
    """vLLM's executor back end as sparkrun decides it: a `distributed_executor_backend` default wins over the
    command's literal flag (sparkrun forces the flag to it), and its Ray runtime adds Ray on a cluster only."""
    if engine != "vllm":
        return args, backend
    chosen = defaults.get("distributed_executor_backend")
    if templated and chosen is not None:
        args = argv.with_flag(args, "--distributed-executor-backend", str(chosen))
    if backend == "ray" and nodes == 1 and not argv.has_flag(args, "--distributed-executor-backend"):
        backend = None
    return args, backend


def _nodes(data: dict[str, Any], where: str, wanted: int) -> tuple[int | None, list[str]]:
    """The node count: what the node limits allow, the parallelism's product when they allow a range."""
    low, high = _positive(data, "min_nodes", where, "min_nodes"), _positive(data, "max_nodes", where, "max_nodes")
    if data.get("solo_only") is True or data.get("mode") == "solo":
        low = high = 1
    elif data.get("cluster_only") is True or data.get("mode") == "cluster":
        low = max(low or 2, 2)
    if low is not None and high is not None and low > high:
        raise BadInput(f"{where}: min_nodes {low} is more than max_nodes {high}", "fix the node limits")
    if low is not None and low == high:
        return low, []
    if (low or 1) <= wanted <= (high or wanted):
        return wanted, ([f"node limits {low or 1}-{high or 'any'}: the parallelism asks for {wanted}"])
    return (low or 1), [f"node limits {low or 1}-{high or 'any'}: the smallest is used"]


def _parallel(data: dict[str, Any], defaults: dict[str, Any], where: str) -> tuple[Any, Any, Any, list[str]]:
    """Tensor and pipeline parallelism from the defaults, and the node count their product (data parallelism's
    too) asks for within the node limits, with what was decided."""
    tp = _positive(defaults, "tensor_parallel", where, "defaults.tensor_parallel")
    pp = _positive(defaults, "pipeline_parallel", where, "defaults.pipeline_parallel")
    dp = _positive(defaults, "data_parallel", where, "defaults.data_parallel")
    nodes, node_notes = _nodes(data, where, (tp or 1) * (pp or 1) * (dp or 1))
    return tp, pp, nodes, node_notes


def _checkpoints(data: dict[str, Any], model: str | None, where: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Extra models named in distribution_config (sparkrun mirrors them to every rank, as sparkplay will): an entry
    is a name or {name, revision}, and a name is a template like the command's ({model}, {container}, defaults)."""
    config = data.get("distribution_config")
    entries = (config or {}).get("models", {}).get("entries") if isinstance(config, dict) else None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise BadInput(f"{where}: distribution_config.models.entries must be a list", "fix distribution_config")
    found = []
    for entry in entries:
        entry = {"name": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise BadInput(f"{where}: a distribution_config model has no name", "give each entry a name: org/repo")
        name = expand(entry["name"], values, f"{where}: distribution_config")
        if name == model or any(c["repo"] == name for c in found):
            continue
        revision = entry.get("revision")
        found.append({"repo": name, "revision": str(revision) if revision is not None else None})
    return found


@dataclass
class _Command:
    """The engine's command line as the recipe gives it (its template filled) or as built from its defaults."""

    parsed: cmdline.Command
    script: list[str]  # what the template runs before the engine (a preamble)
    generated: bool = False
    unmapped: list[str] = field(default_factory=list)  # defaults with no flag, when it was built
    served_note: str | None = None
    v1_note: str | None = None


def _mappings(data: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The recipe's defaults and env, each a mapping (empty when absent)."""
    defaults = data.get("defaults") or {}
    env_in = data.get("env") or {}
    if not isinstance(defaults, dict) or not isinstance(env_in, dict):
        raise BadInput(f"{where}: defaults and env must be mappings of key: value", "fix the recipe's YAML")
    return defaults, env_in


def _version(data: dict[str, Any], where: str) -> tuple[str, str | None]:
    """The recipe's version, and a note when it is none of those sparkplay was written against (sparkrun reads
    every version but "1" alike, so another is read as version 2 is; its new keys are named as not applied)."""
    version = str(data.get("recipe_version", data.get("sparkrun_version", "2"))).strip()
    if version in VERSIONS:
        return version, None
    if not re.fullmatch(r"\d+(\.\d+)*", version) or int(version.split(".")[0]) < 1:
        raise BadInput(f"{where}: sparkrun recipe_version {version!r} is not a version", "give a whole number (1 to 4)")
    return version, (
        f"recipe_version {version} is none of those sparkplay knows ({', '.join(VERSIONS)}): read as sparkrun reads "
        'every version but "1", as version 2 (each key sparkplay does not read is named below)'
    )


def _runtime(data: dict[str, Any], command_text: str | None, where: str) -> tuple[str, str, str | None]:
    """sparkrun's runtime (named, or guessed from the command's program as sparkrun does), its engine, its back
    end."""
    runtime = _text(data, "runtime", where)
    if runtime is None and command_text:
        first = command_text.split(None, 1)[0].rsplit("/", 1)[-1] if command_text.split() else ""
        runtime = next((rt for word, rt in COMMAND_HINTS if first == word), "vllm")
        if first == "mpirun" and "trtllm" in command_text:
            runtime = "trtllm"
    runtime = (runtime or "vllm").lower()
    if runtime not in RUNTIMES:
        raise BadInput(f"{where}: unknown sparkrun runtime {runtime!r}", f"use one of {', '.join(RUNTIMES)}")
    engine, backend = RUNTIMES[runtime]
    return runtime, engine, backend


def _command(
    command_text: str | None,
    recipe: tuple[str, str, str, str | None, str],
    values: dict[str, Any],
    defaults: dict[str, Any],
) -> _Command:
    """The command: the template filled from `values` and read like any engine command line, or, without one,
    built from the defaults through the runtime's flag map (as sparkrun does). `recipe`: (version, runtime,
    engine, model, where) as read."""
    version, runtime, engine, model, where = recipe
    if not command_text:
        if not model:
            raise BadInput(f"{where}: the recipe names no model and no command", "add model: org/name")
        argv, unmapped = _generated_command(engine, model, defaults)
        return _Command(cmdline.parse(shlex.join(argv)), [], generated=True, unmapped=unmapped)
    parsed, script = parse_command(expand(command_text, values, where, version), where, engine != "llamacpp")
    if parsed.engine != engine:
        raise BadInput(f"{where}: runtime {runtime} but the command starts {parsed.engine}'s server", "make them agree")
    # a version 1 template that reads as sparkrun's (not eugr's str.format) was filled by sparkrun's rule: said
    v1_note = None
    if version == "1" and reads_as(command_text) == "sparkrun":
        v1_note = (
            "a version 1 template that eugr's str.format cannot fill (single-brace JSON, a field that is not a "
            "plain name): filled by sparkrun's rule, as sparkrun runs it"
        )
    return _Command(parsed, script, served_note=sparkrun_rules.served_from_defaults(parsed, defaults), v1_note=v1_note)


def _llamacpp_source(engine: str, model: str | None, parsed: cmdline.Command) -> tuple[str | None, str | None]:
    """llama.cpp: `model` is a hub repository (repo:QUANT picks a GGUF variant) unless the command's -m names it
    as the file itself; a file is model.path, a repository a checkpoint whose file must be named. The
    repository and the variant (None, None for another engine)."""
    if engine != "llamacpp":
        return None, None
    repo, _, variant = (model or "").partition(":")
    if not repo or repo == parsed.model or repo.endswith(".gguf"):
        repo = None
    return repo, variant or None


def _env(env_in: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The recipe's env, and the keys left out: sparkrun fills a shell variable from the controller's
    environment at launch, and sparkplay never stores such values in a recipe."""
    env: dict[str, str] = {}
    secrets: list[str] = []
    for key, value in env_in.items():
        text_value = _scalar(value)
        if SHELL_VARIABLE.search(text_value):
            secrets.append(str(key))
            continue
        env[str(key)] = text_value
    return env, secrets


def _left_out(
    data: dict[str, Any], engine: str, command: _Command, values: dict[str, Any], where: str, mods_from: Sequence[Path]
) -> notes.LeftOut:
    """What the launcher does beyond the engine's command: what sparkplay honours (mods, pre_exec, the bench
    block, the container's limits), what it keeps unhonoured and what it does not read."""
    defaults = data.get("defaults") or {}
    executor = data.get("executor_config") if isinstance(data.get("executor_config"), dict) else {}
    left = notes.LeftOut(
        {k: data[k] for k in NOT_HONOURED if data.get(k) not in (None, [], {}, "")},
        {k: v for k, v in data.items() if k not in READ and k not in NOT_HONOURED},
        sparkrun_executor.read(executor, engine),
    )
    left.mods, left.mods_missing = mods.resolve_all(data.get("mods"), where, mods_from)
    if left.mods:
        del left.not_honoured["mods"]
    left.pre_exec, left.pre_exec_missing = hooks.read(data.get("pre_exec"), values)
    if left.pre_exec and engine == "llamacpp":
        left.pre_exec = None
        left.pre_exec_missing = "llama.cpp runs from the node's packages: no container to run them in"
    if left.pre_exec:
        del left.not_honoured["pre_exec"]
    left.bench, bench_left = bench_profile(data, where)
    left.not_honoured.update(bench_left)
    if command.unmapped:  # defaults the engine's flag map has no flag for, with no command to place them
        left.not_honoured["defaults"] = {k: defaults[k] for k in command.unmapped}
    if api := api_options(engine, defaults):
        left.not_honoured["api_options"] = api
    if engine == "llamacpp" and data.get("container"):
        left.not_honoured["container"] = data["container"]  # sparkplay runs llama.cpp from the node's packages
    if left.container.left:
        left.not_honoured["executor_config"] = left.container.left
    return left


def to_raw(
    data: dict[str, Any], source: dict[str, Any], name: str | None, where: str, mods_from: Sequence[Path] = ()
) -> RawRecipe:
    version, version_note = _version(data, where)
    model = _text(data, "model", where)
    defaults, env_in = _mappings(data, where)
    command_text = _text(data, "command", where)
    runtime, engine, backend = _runtime(data, command_text, where)
    # sparkrun collapses a default's doubled braces at load (eugr's version 1 inserts values as they are)
    values = {**({k: collapse_escapes(v) for k, v in defaults.items()} if version != "1" else defaults)}
    values["model"] = model or ""
    command = _command(command_text, (version, runtime, engine, model, where), values, defaults)
    parsed = command.parsed
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    title = _text(data, "name", where) or str(metadata.get("description") or model or "recipe").splitlines()[0]
    description = metadata.get("description")
    tp, pp, nodes, node_notes = _parallel(data, defaults, where)
    args, backend = _vllm_backend(engine, list(parsed.args), backend, defaults, bool(command_text), nodes or 1)
    shm = (data.get("executor_config") if isinstance(data.get("executor_config"), dict) else {}).get("shm_size")
    env, secrets = _env(env_in)
    left = _left_out(data, engine, command, values, where, mods_from)
    raw = RawRecipe(
        name="",
        title=title,
        source=source,
        engine=engine,
        model=parsed.model,
        args=args,
        env={**parsed.env, **env},
        pinning=parsed.pinning,
        image=_text(data, "container", where) if engine != "llamacpp" else None,
        nodes=nodes,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        distributed_backend=backend,
        shm_size=str(shm) if shm is not None else None,
        ulimits=left.container.ulimits,
        container_user=left.container.user,
        notes=description if isinstance(description, str) else None,
        extra={**left.unknown, **({"sparkrun_not_honoured": left.not_honoured} if left.not_honoured else {})},
    )
    raw.drop_per_rank()  # the ranks and the leader's address are the inventory's (sparkrun adds its own per node too)
    if engine != "llamacpp" and not raw.image:  # sparkrun's own image for the runtime, said; none: asked for
        raw.image = sparkrun_rules.default_image(data, version, runtime)
        raw.image_unnamed = raw.image is None
        if raw.image:
            said = f"the recipe names no container: sparkrun runs {runtime} on DGX Spark in {raw.image}"
            raw.note("engine.image", "filled", f"{said} (a moving tag: apply pins its digest)")
    raw.mods = left.mods
    raw.pre_exec = left.pre_exec
    script = command.script
    raw.preamble = {"commands": script, "sha256": hooks.digest(script)} if script else None
    notes.privileged(raw, left)
    if left.bench:
        raw.note("bench", "derived", "the recipe's benchmark block: what `sparkplay bench` measures by default")
    raw.revision, raw.bench = _text(data, "model_revision", where), left.bench
    # a command serving a local path: the recipe's `model` is the repository behind it (normalise says so)
    model_repo, raw.quant = _llamacpp_source(engine, model, parsed)
    raw.repo = model_repo if engine == "llamacpp" else model
    raw.checkpoints = _checkpoints(data, model, where, {**values, "container": data.get("container") or ""})
    if command.generated:
        raw.note("serve.args", "derived", f"the recipe has no command: built from its defaults ({runtime} flag map)")
    for field_name, said in (
        ("source", version_note),
        ("serve.args", command.v1_note),
        ("model.served_name", command.served_note),
        *(("topology.nodes", detail) for detail in node_notes),
    ):
        if said:
            raw.note(field_name, "derived", said)
    notes.left_out(raw, secrets, left)
    if raw.image and sparkrun_rules.built_locally(data, version, runtime):
        notes.built_locally(raw, sparkrun_rules.arguments(data.get("build_args")))
    served = argv.flag_value(raw.args, "--served-model-name", "--alias", "-a")
    stem = PurePosixPath(urlsplit(where).path).stem  # sparkrun names a recipe by its file
    raw.name = name or slugify(_text(data, "name", where) or stem or served or title)
    return raw
