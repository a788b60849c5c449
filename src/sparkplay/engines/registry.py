"""The engines sparkplay knows: every package under `sparkplay/engines/` with a `spec` module.

An engine is added by adding its package (docs/architecture.md, "Add an engine"); nothing else names it.
Packages are found on the engines package's own path, so a package placed there (or a folder added to that
path, as tests/test_engine_registry.py does with a toy engine) is an engine.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Sequence

import sparkplay.engines
from sparkplay import imageref
from sparkplay.engines.spec import EngineSpec, KnownModel
from sparkplay.errors import BadInput


@functools.cache
def _specs(path: tuple[str, ...]) -> dict[str, EngineSpec]:
    found: dict[str, EngineSpec] = {}
    for module in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if not module.ispkg:
            continue
        try:
            spec = importlib.import_module(f"sparkplay.engines.{module.name}.spec").SPEC
        except ModuleNotFoundError as exc:
            if exc.name != f"sparkplay.engines.{module.name}.spec":
                raise
            continue  # a package that is not an engine
        if spec.name != module.name:
            raise RuntimeError(f"engine package {module.name} names its spec {spec.name!r}")
        found[spec.name] = spec
    return found


def specs() -> dict[str, EngineSpec]:
    """Every engine's spec, by name."""
    return _specs(tuple(sparkplay.engines.__path__))


def names() -> list[str]:
    return sorted(specs())


def spec(name: str) -> EngineSpec:
    """The engine `name`'s spec; an engine sparkplay does not know is refused, naming those it does."""
    found = specs().get(name)
    if found is None:
        raise BadInput(f"engine {name!r} is not one sparkplay knows", f"use one of {', '.join(names())}")
    return found


def known_models() -> list[KnownModel]:
    return [model for s in specs().values() for model in s.models]


def trusted_images() -> tuple[str, ...]:
    """The image repositories trusted unless the inventory says otherwise: every engine's own."""
    return tuple(dict.fromkeys(image for s in specs().values() for image in s.images))


def command_help() -> str:
    """How each engine's serve command is written, for a command line that names none of them."""
    return "sparkplay knows " + "; ".join(s.command_help for s in specs().values())


def by_flags(args: Sequence[str]) -> str | None:
    """The engine flags given alone say: the one whose own flag (EngineSpec.own_flags) comes first in ARGS
    (`--flag=value` too), else one that claims a flag several engines spell (EngineSpec.claimed_flags)."""
    owners = {flag: name for name, s in specs().items() for flag in s.own_flags}
    flags = [word.split("=", 1)[0] for word in args if word.startswith("-")]
    if owner := next((owners[flag] for flag in flags if flag in owners), None):
        return owner
    return next((name for name, s in specs().items() if s.claimed_flags.intersection(flags)), None)


def by_image_name(image: str) -> str | None:
    """The engine an image's name spells (EngineSpec.spellings as a word of its repository: vllm/vllm-omni,
    lmsysorg/sglang, spark-vllm, local/llama.cpp); None: none does."""
    repository = (imageref.repository(image) or image).lower()  # an unparsable one: its tag ends the word
    for name, spec in specs().items():
        if any(re.search(rf"(^|[/_.-]){re.escape(word)}($|[/_.:-])", repository) for word in spec.spellings):
            return name
    return None
