"""A profile of settings: the shell variables a launcher script sources before it starts the engine (`MODEL=`,
`SERVE_ARGS=(...)`, `TP=2`, `EXTRA_ARGS="..."`, `IMAGE=`), with no engine command of its own.

A profile is a recipe in variables. It is read by the names such launchers give them (the launchers and
profiles of the corpora docs/recipes.md names: a model, the engine's flags in an array or a string, an image, an
environment, and a few settings every engine has a flag for), written out as the engine's command line and
imported as a pasted one, so every rule of the pasted importer applies. The engine is the one the arguments'
variable names (`VLLM_ARGS`), the flags themselves (an engine's own, EngineSpec.own_flags) or the image say.
What the launcher adds itself is not in the text: said, with how to import the launcher with the profile.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from sparkplay import argv, imageref
from sparkplay.engines import registry
from sparkplay.engines.spec import EngineSpec
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline
from sparkplay.recipes.importers.pasted import shell

MODEL = ("MODEL", "MODEL_ID", "MODEL_NAME", "MODEL_REPO", "HF_MODEL", "HF_MODEL_ID", "HF_REPO", "MODEL_PATH")
IMAGE = ("IMAGE", "DOCKER_IMAGE", "CONTAINER_IMAGE", "IMAGE_NAME", "VLLM_IMAGE", "SGLANG_IMAGE", "TRTLLM_IMAGE")
ENV = ("ENV_EXTRA", "EXTRA_ENV", "ENV_VARS", "DOCKER_ENV", "ENVIRONMENT")
# the engine's flags: SERVE_ARGS, EXTRA_ARGS, ARGS, and each with an engine's name first (VLLM_ARGS,
# LLAMA_CPP_EXTRA_ARGS: EngineSpec.spellings, prefix_engine)
ARGS = re.compile(r"^(?:(?:SERVE|SERVER|ENGINE|LAUNCH|MODEL)_)?(?:EXTRA_)?(?:ARGS|FLAGS|OPTS|OPTIONS)$")
# settings each engine has a flag for, by the recipe field the flag states (EngineSpec.field_flags)
SETTINGS = {
    "tensor_parallel": ("TP", "TP_SIZE", "TENSOR_PARALLEL", "TENSOR_PARALLEL_SIZE"),
    "pipeline_parallel": ("PP", "PP_SIZE", "PIPELINE_PARALLEL_SIZE"),
    "context_length": ("MAX_MODEL_LEN", "CONTEXT_LENGTH", "CTX_SIZE", "MAX_CONTEXT", "CONTEXT"),
    "gpu_memory_utilization": ("GPU_MEMORY_UTILIZATION", "GPU_MEM_UTIL", "GPU_MEMORY_UTIL", "GPU_UTIL"),
    "port": ("PORT", "SERVE_PORT", "API_PORT"),
    "bind": ("HOST", "BIND_HOST", "SERVE_HOST"),
    "served_name": ("SERVED_MODEL_NAME", "SERVED_NAME"),
}
# what a profile may run besides its assignments: sourcing another profile, exporting, printing
QUIET = frozenset({".", "source", "export", "echo", "printf", "set", "unset", "readonly", "declare", ":", "true"})
# what the reader itself sets
OWN = frozenset({"BASH_SOURCE"})


def is_profile(scalars: Mapping[str, str], ran: list[str]) -> bool:
    """Settings that name a model, in a text that runs nothing but what a profile runs."""
    return any(scalars.get(name) for name in MODEL) and all(p.split()[0] in QUIET for p in ran if p.split())


def command(scalars: Mapping[str, str], arrays: Mapping[str, list[str]], where: str) -> tuple[str, list[str]]:
    """The engine command line the profile's settings make, and what the import says about it."""
    model_var = next(name for name in MODEL if scalars.get(name))
    model = scalars[model_var]
    flags, named, prefixed = _flags(scalars, arrays)
    image_var = next((name for name in IMAGE if scalars.get(name)), None)
    image = scalars[image_var] if image_var else None
    if image and not shell.unknowns(image) and not imageref.is_reference(image):
        raise BadInput(
            f"{where}: {image_var} holds {image!r}, which is no image reference", f"give {image_var} as REPO:TAG"
        )
    engine, why = _engine(prefixed, flags, image)
    if engine is None:
        settings = [f"{k}={v}" for k, v in scalars.items() if v and k not in named]
        read = ", ".join([*settings[:6], *named, *(["..."] if len(settings) > 6 else [])])
        raise BadInput(
            f"{where} is a profile of settings ({read}) that does not say its engine: no flag of it is one "
            "engine's own, and no image or variable name says one",
            "import the launcher script that sources it, with the profile as its argument (sparkplay recipe import "
            "LAUNCHER --arg PROFILE), or write the engine's command line",
        )
    spec = registry.spec(engine)
    said = [
        f"read as a profile of settings a launcher sources: {model_var} is the model"
        + (f", {' and '.join(named)} {spec.title}'s flags" if named else "")
        + f" ({why})"
        + (f", {image_var} the image" if image else "")
    ]
    words, from_settings, read = _settings(spec, scalars, flags)
    said += from_settings
    env = _env(scalars, arrays, where)
    program = spec.command_words(model)
    line = (
        ["docker", "run", "--gpus", "all", *[w for e in env for w in ("-e", e)], image, *program, *flags, *words]
        if image
        else [*env, *program, *flags, *words]
    )
    used = {model_var, *([image_var] if image_var else []), *named, *read, *ENV, *OWN}
    unread = [k for k in [*scalars, *arrays] if k not in used and _set(k, scalars, arrays)]
    said.append(
        "the launcher that sources the profile is not in the text: what it adds itself (its own flags, image or "
        "settings) is not known; to have it, import the launcher with the profile: sparkplay recipe import "
        "LAUNCHER --arg PROFILE"
    )
    if unread:
        said.append(
            f"left out, as a launcher's own settings sparkplay does not read: {', '.join(dict.fromkeys(unread))}"
        )
    return shlex.join(line), said


def _flags(scalars: Mapping[str, str], arrays: Mapping[str, list[str]]) -> tuple[list[str], list[str], str | None]:
    """The engine's flags the profile holds (arrays as they are, strings split as the shell splits them), the
    variables they came from, and the engine a variable's name says."""
    flags: list[str] = []
    named: list[str] = []
    prefixed = None
    for name in dict.fromkeys([*arrays, *scalars]):  # an array's name once, its elements as they are
        engine, rest = prefix_engine(name)
        if not ARGS.match(rest):
            continue
        words = list(arrays[name]) if name in arrays else _split(scalars[name], name)
        if not words:
            continue
        flags += words
        named.append(name)
        prefixed = prefixed or engine
    return flags, named, prefixed


def _split(text: str, name: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise BadInput(
            f"the profile's {name} cannot be split into flags ({exc})", f"fix the quoting of {name}"
        ) from None


def _engine(prefixed: str | None, flags: list[str], image: str | None) -> tuple[str | None, str]:
    if prefixed:
        return prefixed, "the variable's name says it"
    if found := registry.by_flags(flags):
        spec = registry.spec(found)
        own = next((f for f in flags if f.split("=")[0] in spec.own_flags), None)
        return found, f"{own} is its own flag" if own else "flags several engines spell, read as its"
    if image and (found := registry.by_image_name(image)):
        return found, f"its image {image} is {registry.spec(found).title}'s"
    return None, ""


def prefix_engine(name: str) -> tuple[str | None, str]:
    """The engine a variable's name starts with (VLLM_ARGS, LLAMA_CPP_EXTRA_ARGS), and the rest of the name."""
    for spec in registry.specs().values():
        for word in spec.spellings:
            if name.startswith(prefix := re.sub(r"[^A-Z0-9]", "_", word.upper()) + "_"):
                return spec.name, name.removeprefix(prefix)
    return None, name


def _settings(spec: EngineSpec, scalars: Mapping[str, str], flags: list[str]) -> tuple[list[str], list[str], set[str]]:
    """The flags the profile's named settings make (TP=2: --tensor-parallel-size 2), where the flags leave them
    out; what was said of each; the settings read (one the engine has no flag for is not)."""
    words: list[str] = []
    said: list[str] = []
    read: set[str] = set()
    for field, names in SETTINGS.items():
        for name in names:
            value = scalars.get(name)
            if not value:
                continue
            own = spec.context_flags if field == "context_length" else spec.field_flags.get(field, ())
            if not own:
                break
            read.add(name)
            if argv.has_flag(flags, *own):
                said.append(f"{name}={value} and the flags' {own[0]}: the flag is kept")
            else:
                words += [own[0], value]
                said.append(f"{name}={value} is {own[0]} {value}")
            break
    return words, said, read


def _env(scalars: Mapping[str, str], arrays: Mapping[str, list[str]], where: str) -> list[str]:
    """NAME=VALUE words of the profile's environment variables (an array, or a string of them)."""
    words: list[str] = []
    for name in ENV:
        values = arrays.get(name) or (_split(scalars[name], name) if scalars.get(name) else [])
        for word in values:
            if not cmdline.ENV_ASSIGNMENT.match(word):
                raise BadInput(f"{where}: {name} holds {word!r}, not NAME=VALUE", f"fix {name} in the profile")
            words.append(word)
    return words


def _set(name: str, scalars: Mapping[str, str], arrays: Mapping[str, list[str]]) -> bool:
    return bool(arrays.get(name)) if name in arrays else bool(scalars.get(name))
