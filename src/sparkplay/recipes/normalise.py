"""From what an importer read to one normalised `sparkplay.recipe/v1` document.

Importers hand over a RawRecipe (sparkplay.recipes.raw): the engine's flags
exactly as given, the environment, and whatever else the source stated
outright. What the flags say is read by sparkplay.recipes.flags (never
changed); gaps are filled from sparkplay.recipes.known; and every derived,
filled or cleaned value is noted in `provenance`.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from sparkplay import addresses, argv
from sparkplay.engines import registry
from sparkplay.engines.spec import EngineSpec
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline, flags, known, secrets
from sparkplay.recipes import model_source as source
from sparkplay.recipes.model import SCHEMA_ID
from sparkplay.recipes.raw import RawRecipe

QUANT_PATTERN = re.compile(r"(nvfp4|mxfp4|fp8|awq|gptq|int4|int8|q4_k_m|q5_k_m|q8_0|bf16|f16)", re.IGNORECASE)


def _set_path(doc: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = copy.deepcopy(value)


def _get_path(doc: dict[str, Any], dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _pick(raw: RawRecipe, key: str, stated: Any, derived: Any, default: Any, detail: str) -> Any:
    """Stated by the source > derived from flags > default; note where it came from."""
    if stated is not None:
        return stated
    if derived is not None:
        raw.note(key, "derived", detail)
        return derived
    if default is not None:
        raw.note(key, "default", f"not stated; sparkplay's default {default!r}")
    return default


CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _check_one_line(raw: RawRecipe) -> None:
    """Flags and env reach argv, an env file and a unit: a control character there is refused, not carried."""
    named = [(f"serve.args[{i}]", a) for i, a in enumerate(raw.args)]
    named += [(f"serve.env.{k}", f"{k}={v}") for k, v in raw.env.items()]
    named += [(key, value) for key, value in (("engine.image", raw.image), ("model", raw.model)) if value]
    for key, value in named:
        if CONTROL.search(value):
            raise BadInput(
                f"{key} holds a control character or a line break ({value[:40]!r})",
                f"give {key} on one line of printable text",
            )


def _json_on_one_line(raw: RawRecipe) -> None:
    """A flag's JSON object or list that a script writes over several lines, in quotes: the same value on one
    line, as an argv, an env file and a unit carry it (the engine's JSON parser reads no difference)."""
    for i, arg in enumerate(raw.args):
        flag, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        if not CONTROL.search(value):
            continue
        try:
            parsed = json.loads(value)
        except ValueError:
            continue
        if isinstance(parsed, dict | list):
            raw.args[i] = flag + eq + json.dumps(parsed, ensure_ascii=False)
            named = flag or (raw.args[i - 1] if i else "an argument")
            raw.note("serve.args", "cleaned", f"the JSON given to {named} written on one line (the same value)")


def _one_line_title(raw: RawRecipe) -> str:
    title = " ".join(CONTROL.sub(" ", raw.title).split())[:200] or "recipe"
    if title != raw.title:
        raw.note("title", "cleaned", "line breaks and control characters replaced, spaces collapsed")
    return title


# what a person pasted (a command line, a compose service, a page's code block, a llama-swap model, a Kubernetes
# container): it says how many nodes it runs on
PASTED_KINDS = frozenset({"command", "compose", "page", "llama-swap", "kubernetes"})


def _spelling(raw: RawRecipe, spec: EngineSpec) -> None:
    """Each flag written as the engine's parser reads it, so every rule here sees the flag."""
    cleaned = spec.spelled(raw.args)
    if cleaned != raw.args:
        changed = [a.partition("=")[0] for a, b in zip(raw.args, cleaned, strict=True) if a != b]
        raw.note(
            "serve.args", "cleaned", f"{', '.join(changed)} written with dashes, as {spec.title}'s parser reads them"
        )
        raw.args = cleaned


def normalise(raw: RawRecipe) -> dict[str, Any]:
    """The normalised recipe document (not yet schema-validated)."""
    spec = registry.spec(raw.engine)
    _spelling(raw, spec)
    raw.args, left_out = secrets.without_flags(raw.args)  # every importer's: a pasted one's are out already
    for flag in left_out:
        raw.note("serve.args", "ignored", secrets.note(flag))
    for name in [n for n in raw.env if secrets.ENV_NAME.search(n)]:
        del raw.env[name]
        raw.note("serve.env", "ignored", secrets.note(name))
    flags.check_json_flags(raw.args)
    flags.left_out(raw)
    _json_on_one_line(raw)
    _check_one_line(raw)
    engine_defaults = spec.defaults
    derived = flags.derive(raw)
    flag_map = argv.flag_map(raw.args)

    # an engine whose model argument is always a file (llama.cpp's -m: org/file.gguf looks like a repository
    # but is not one) names its hub repository by a flag of its own (-hf)
    model_is_repo = (
        raw.model is not None and not spec.model_is_file and source.REPO_PATTERN.match(raw.model) is not None
    )
    if raw.model is not None and not model_is_repo:
        source.check_path(raw.model)
    hub = spec.hub_model(raw.args)
    repo = raw.model if model_is_repo else raw.repo or (hub.split(":", 1)[0] if hub else None)
    gguf = spec.gguf(raw.args, raw.model, repo, raw.quant)
    if raw.model and not model_is_repo and not spec.model_is_file:
        repo = source.served_path_repo(raw, repo)
    source.revision_flag(raw, repo)
    if raw.pinning:
        pinned = raw.pinning[0].rsplit("/", 1)[-1] in cmdline.PINNING
        raw.note(
            "serve.args",
            "ignored",
            f"the command ran the engine under `{' '.join(raw.pinning)}`: sparkplay starts the engine itself, "
            + ("one per node, without CPU pinning" if pinned else "one rank per node, with its own launcher"),
        )
    served = derived["served_name"]
    family = spec.family(raw.args, raw.image, raw.note)
    unnamed = spec.unnamed(raw.name) if served is None else None
    if served is None and spec.serves_model_argument(family) and raw.model:
        # what the engine serves the model as without a name flag: its model argument, as written
        served = raw.model
        raw.note(
            "model.served_name",
            "derived",
            f"no served-name flag: the engine serves the model as its model "
            f"argument, {served!r}; sparkplay names it so (it serves the checkpoint from its own path)",
        )
    elif unnamed is not None:
        raw.note("model.served_name", "derived", unnamed)
    tp = _pick(raw, "topology.tensor_parallel", raw.tensor_parallel, derived["tensor_parallel"], 1, "engine flags")
    pp = _pick(raw, "topology.pipeline_parallel", raw.pipeline_parallel, derived["pipeline_parallel"], 1, "flags")
    nodes = raw.nodes if raw.nodes is not None else derived["nodes"]
    if raw.nodes is not None:
        pass
    elif nodes is not None:
        raw.note("topology.nodes", "derived", "engine flags")
    elif not spec.nodes_from_flags:
        nodes = tp * pp  # one GPU per Spark
        raw.note("topology.nodes", "derived", f"tensor x pipeline parallel ({tp} x {pp}), one GPU per node")
    elif raw.source.get("kind") in PASTED_KINDS:
        nodes = 1  # a pasted llama-server names its RPC workers itself (--rpc), or has none: it runs on one node
        raw.note(
            "topology.nodes",
            "derived",
            "the command names no --rpc worker: it runs on one node (--set topology.nodes=N spreads it over N "
            "ranks with llama.cpp's RPC backend)",
        )
    port = raw.port or derived["port"]
    if port is None:
        port = engine_defaults.port
        raw.note("serve.port", "default", f"the {raw.engine} engine's default port")
    bind = raw.bind or derived["bind"]
    if bind is None:
        # the engines' APIs have no authentication: loopback unless the user says otherwise
        bind = addresses.LOOPBACK_ADDRESS
        raw.note("serve.bind", "default", "not stated; APIs bind to loopback unless the user chooses otherwise")
    elif addresses.is_wildcard(bind):
        raw.note(
            "serve.bind",
            "narrowed",
            f"the recipe binds {bind}; imported as {addresses.LOOPBACK_ADDRESS} (the API has no "
            "authentication): set serve_bind in the inventory to listen wider",
        )
        bind = addresses.LOOPBACK_ADDRESS
    quant_match = QUANT_PATTERN.search(raw.quant or repo or raw.model or "")
    context = derived["context_length"]
    if context is not None:
        raw.note("context_length", "derived", "engine flags")

    health = engine_defaults.health_timeout_s
    ready = raw.env.get(spec.ready_timeout_env) if spec.ready_timeout_env else None
    if raw.health_timeout_s is not None:  # stated by the source outright
        health = raw.health_timeout_s
    elif ready and ready.isdigit():
        health = int(ready)
        raw.note("serve.health_timeout_s", "derived", f"{spec.ready_timeout_env} in the recipe's env")

    doc: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "name": raw.name,
        "title": _one_line_title(raw),
        "source": raw.source,
        "engine": {
            "name": raw.engine,
            "image": raw.image,
            "image_dir": raw.image_dir,
            "packages": list(engine_defaults.packages) if engine_defaults.runtime == "native" else [],
            "runtime": engine_defaults.runtime,
            **({"family": family} if family else {}),
            **({"mods": raw.mods} if raw.mods else {}),
            **({"pre_exec": raw.pre_exec} if raw.pre_exec else {}),
            **({"preamble": raw.preamble} if raw.preamble else {}),
        },
        "model": {
            "repo": repo,
            "revision": raw.revision,
            "quant": quant_match.group(1).lower() if quant_match else None,
            "served_name": served,
            # vLLM answers to every name --served-model-name lists (the first is the model's own)
            **({"served_aliases": aliases} if (aliases := flags.aliases(raw)) else {}),
            "path": None if model_is_repo else source.model_file(raw, repo),
            **({"gguf": gguf} if gguf else {}),
            "checkpoints": [],
            "overlay": None,
        },
        "context_length": context,
        "topology": {
            "nodes": nodes,
            "tensor_parallel": tp,
            "pipeline_parallel": pp,
            "expert_parallel": derived["expert_parallel"] or 1,
        },
        "serve": {
            "args": list(raw.args),
            "env": dict(raw.env),
            "port": port,
            "bind": bind,
            "health_timeout_s": health,
            "distributed_backend": raw.distributed_backend,
            "shm_size": raw.shm_size,
            **({"ulimits": list(raw.ulimits)} if raw.ulimits else {}),
            **({"container_user": raw.container_user} if raw.container_user else {}),
        },
        "speculative": flags.speculative(raw),
        "knobs": dict(raw.knobs),
        "requirements": {"gpu_arch": None, "driver_min": None, "disk_per_node_gb": None, "memory_gb": None},
        "notes": raw.notes,
        **({"bench": raw.bench} if raw.bench else {}),
        "provenance": [],
        "extra": dict(raw.extra),
    }
    # the engine launcher's profile knobs (the SparkGLM Atlas images'): another family of its images reads none
    profile = spec.reads_knobs(family)
    for key, knob in engine_defaults.knob_env.items() if profile else ():
        if key in doc["serve"]["env"]:
            value = doc["serve"]["env"].pop(key)
            if knob in ("fabric_siblings", "display_carveout", "kv_shard"):
                doc["knobs"][knob] = value == "1"
            raw.note("serve.env", "derived", f"{key} moved to the {knob} knob, which governs it")
    for knob, default in engine_defaults.knobs.items() if profile else ():
        doc["knobs"].setdefault(knob, default)
    if derived["gpu_memory_utilization"] is not None:
        doc["knobs"].setdefault("gpu_memory_utilization", derived["gpu_memory_utilization"])
    if doc["model"]["quant"] is not None and raw.quant is None:
        raw.note("model.quant", "derived", "the model's name")
    if doc["speculative"] is not None:
        raw.note("speculative", "derived", "engine flags")

    known_model = known.find_model(raw.engine, raw.model, flag_map)
    if known_model is not None:
        for key, value in known_model.fills.items():
            if _get_path(doc, key) in (None, []):
                _set_path(doc, key, value)
                raw.note(key, "filled", f"known model table: {known_model.label}")
    if engine_defaults.image_repository and doc["engine"]["image"] and ":" not in doc["engine"]["image"]:
        # the recipe gave only a tag; the repository is the engine's own
        doc["engine"]["image"] = f"{engine_defaults.image_repository}:{doc['engine']['image']}"
        raw.note("engine.image", "filled", "image repository from the known engines table; tag from the recipe")
    named = raw.image or raw.image_dir or raw.image_unnamed
    if engine_defaults.image and engine_defaults.runtime == "docker" and not named:
        # the source says nothing of an image (one it names, valid or not, is its own and checked as such)
        doc["engine"]["image"] = engine_defaults.image
        raw.note(
            "engine.image",
            "filled",
            f"the source names no image: {engine_defaults.image}, from {engine_defaults.image_from}; "
            "--set engine.image=IMAGE runs another",
        )
    if repo and not doc["model"]["checkpoints"]:
        doc["model"]["checkpoints"] = [source.checkpoint("target", repo, doc["model"]["revision"])]
    source.add_other_models(raw, doc)
    doc["provenance"] = raw.provenance
    return doc


# the engines' flag for the model's revision (vLLM's and SGLang's --revision: a branch, tag or commit)
