"""Importer for the launcher's `recipe.toml` (one recipe per folder, vLLM-style keys)."""

from __future__ import annotations

import json
import shlex
import tomllib
from typing import Any

from sparkplay import argv
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes.flags import JSON_FLAGS
from sparkplay.recipes.model import slugify
from sparkplay.recipes.raw import RawRecipe

# how long the engine may take to become healthy, in seconds, under the names launchers use
HEALTH_KEYS = ("healthcheck_timeout", "health_timeout", "startup_timeout")
# vLLM engine arguments launchers state as keys of their own, beside tensor/pipeline parallel
ENGINE_ARG_KEYS = {"data_parallel_size": "--data-parallel-size", "enable_expert_parallel": "--enable-expert-parallel"}
KNOWN_KEYS = {
    "engine",
    "name",
    "docker_image",
    "docker_image_dir",
    "model",
    "required_nodes",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "distributed_backend",
    *ENGINE_ARG_KEYS,
    "shm_size",
    "args",
    "env",
    "port",
    "host",
    *HEALTH_KEYS,
}
ENGINE_NAMES = {"vllm": "vllm", "atlas": "atlas", "llamacpp": "llamacpp", "llama.cpp": "llamacpp"}


def is_launcher(data: dict[str, Any]) -> bool:
    """TOML that is the launcher's recipe.toml: it names its engine, or has the launcher's own keys (a shell
    profile of NAME="value" lines is TOML too, but only upper-case names)."""
    return "engine" in data or any(key in KNOWN_KEYS for key in data)


def parse_toml(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{where} is not valid TOML ({exc})", "fix the TOML syntax") from None


def leading_comments(text: str) -> str | None:
    """The comment block a recipe.toml opens with (its author's notes and gotchas)."""
    lines: list[str] = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].removeprefix(" "))
    return "\n".join(lines).strip() or None


def _clean_arg(value: str) -> str:
    """Undo what a shell-minded author wrapped around one argument.

    The seed gives --speculative-config as a triple-quoted TOML string that
    holds a newline and single quotes around the JSON. The launcher passes
    argv without a shell, so those characters would reach the engine; the
    argument meant is the text inside.
    """
    stripped = value.strip()
    if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "'\"":
        try:
            inner = shlex.split(stripped)
        except ValueError:
            return stripped
        if len(inner) == 1:
            return inner[0]
    return stripped


def _int(data: dict[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(f"recipe.toml key {key} must be a whole number, got {value!r}", f"fix {key}")
    return value


def to_raw(data: dict[str, Any], source: dict[str, Any], name: str | None, notes: str | None = None) -> RawRecipe:
    engine_text = str(data.get("engine", "")).lower()
    engine = ENGINE_NAMES.get(engine_text)
    if engine is None:
        raise BadInput(f"unknown engine {data.get('engine')!r} in recipe.toml", registry.command_help())
    args_in = data.get("args", [])
    if not isinstance(args_in, list) or not all(isinstance(a, str) for a in args_in):
        raise BadInput("recipe.toml key args must be a list of strings", "give each argument as its own string")
    env_in = data.get("env", {})
    if not isinstance(env_in, dict):
        raise BadInput('recipe.toml [env] must be a table of KEY = "value"', "fix the [env] table")

    raw = RawRecipe(
        name="",
        title=str(data.get("name") or data.get("model") or "recipe"),
        source=source,
        engine=engine,
        model=data.get("model"),
        args=[],
        env={str(k): str(v) for k, v in env_in.items()},
        image=data.get("docker_image"),
        image_dir=data.get("docker_image_dir"),
        nodes=_int(data, "required_nodes"),
        tensor_parallel=_int(data, "tensor_parallel_size"),
        pipeline_parallel=_int(data, "pipeline_parallel_size"),
        distributed_backend=data.get("distributed_backend"),
        shm_size=data.get("shm_size"),
        port=_int(data, "port"),
        health_timeout_s=next((_int(data, k) for k in HEALTH_KEYS if data.get(k) is not None), None),
        bind=data.get("host"),
        notes=notes,
        extra={k: v for k, v in data.items() if k not in KNOWN_KEYS},
    )
    for i, arg in enumerate(args_in):
        cleaned = _clean_arg(arg)
        if cleaned != arg:
            raw.note(f"serve.args[{i}]", "cleaned", "surrounding whitespace and shell quotes removed")
            if i > 0 and args_in[i - 1] in JSON_FLAGS:
                try:
                    json.loads(cleaned)
                except json.JSONDecodeError as exc:
                    raise BadInput(
                        f"{args_in[i - 1]} is not valid JSON ({exc.msg})",
                        f"fix the JSON text given to {args_in[i - 1]}",
                    ) from None
        raw.args.append(cleaned)
    for key, flag in ENGINE_ARG_KEYS.items():  # vLLM engine arguments the launcher states as keys
        value = data.get(key)
        if value in (None, False) or argv.has_flag(raw.args, flag):
            continue
        if engine != "vllm":
            raise BadInput(f"recipe.toml key {key} is a vLLM setting, but the engine is {engine}", f"remove {key}")
        raw.args += [flag] if value is True else [flag, str(_int(data, key))]
        raw.note("serve.args", "derived", f"{flag} from the recipe's {key}")
    served = argv.flag_value(raw.args, "--served-model-name")
    raw.name = name or slugify(served or raw.title)
    return raw
