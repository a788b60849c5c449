"""The normalised recipe: schema, validation, names, YAML form.

Two levels of checking. The JSON Schema (schema.json, shipped in the
package) says whether a document is well formed: importable. `problems()`
adds what a deployment needs: a recipe can be importable and still
incomplete (an unknown model repo, say); apply refuses those and names the
key to set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import yaml

from sparkplay import boundary, codepaths, imageref
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline

SCHEMA_ID = "sparkplay.recipe/v1"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}\Z")


def schema() -> dict[str, Any]:
    """The recipe's JSON Schema, its engines and their image families those the registry holds."""
    return _schema(tuple(registry.names()))


@cache
def _schema(engines: tuple[str, ...]) -> dict[str, Any]:
    doc = json.loads(resources.files("sparkplay.recipes").joinpath("schema.json").read_text())
    engine = doc["properties"]["engine"]["properties"]
    engine["name"]["enum"] = list(engines)
    engine["family"]["enum"] = sorted({f for name in engines for f in registry.spec(name).families})
    return doc


def check_name(name: str) -> str:
    """A recipe name is a file name in recipes/: no separators, no '..', nothing hidden."""
    if "/" in name or "\\" in name or ".." in name or not NAME_PATTERN.match(name):
        raise BadInput(
            f"recipe name {name!r} is not allowed",
            "use 1-64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit, without '..'",
        )
    return name


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")
    slug = re.sub(r"\.{2,}", ".", slug)
    return slug[:64].rstrip("-.") or "recipe"


def schema_errors(doc: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in errors]


@dataclass(frozen=True)
class Problem:
    key: str
    message: str
    fix: str
    severity: str = "error"  # "error" blocks apply; "warning" does not

    def __str__(self) -> str:
        return f"{self.severity}: {self.key}: {self.message}; {self.fix}"


def problems(doc: dict[str, Any]) -> list[Problem]:
    """What stops (errors) or worries (warnings) a deployment of this recipe."""
    found = [Problem("(schema)", message, "fix the recipe file") for message in schema_errors(doc)]
    if found:
        return found
    engine, model = doc["engine"], doc["model"]
    if engine["runtime"] == "docker" and not engine["image"] and not engine.get("image_dir"):
        found.append(Problem("engine.image", "no container image is known", "set engine.image in the recipe"))
    image = engine.get("image")
    if image and not imageref.is_reference(image):
        found.append(
            Problem(
                "engine.image",
                f"{image!r} is not a container image reference",
                "set engine.image to one, e.g. nvcr.io/nvidia/vllm:25.09-py3",
            )
        )
    elif image and imageref.floating(image):
        found.append(
            Problem(
                "engine.image",
                f"{image} names no fixed image (no tag, or latest)",
                "pin a tag or a digest (@sha256:...) so every rank and every run gets the same image",
                "warning",
            )
        )
    spec = registry.spec(engine["name"])
    if engine["runtime"] == "native" and not engine.get("packages") and not spec.native_self_installed:
        found.append(Problem("engine.packages", "no packages are known", "set engine.packages in the recipe"))
    if not model["repo"] and not model.get("checkpoints") and not (spec.serves_local_path and model.get("path")):
        found.append(Problem("model.repo", "the model's repository is not known", "set model.repo (org/name)"))
    if spec.model_is_file and not model.get("path"):
        found.append(
            Problem(
                "model.path",
                "no GGUF file is named",
                "set model.path (the GGUF file under the model root, e.g. Qwen3-1.7B-Q8_0.gguf)",
            )
        )
    mismatch = cmdline.context_mismatch(engine["name"], doc["serve"]["args"], doc["context_length"])
    if mismatch:
        found.append(
            Problem(
                "context_length",
                mismatch,
                "make them the same (or drop the flag: sparkplay writes it from context_length)",
            )
        )
    if doc["context_length"] is None:
        found.append(
            Problem(
                "context_length",
                "the context length is not stated: the engine uses the model's own maximum",
                "set context_length (and the engine's flag) to choose",
                "warning",
            )
        )
    # an engine that spreads layers over however many ranks there are (llama.cpp) needs no count
    if doc["topology"]["nodes"] is None and not spec.nodes_from_flags:
        found.append(Problem("topology.nodes", "the node count is not known", "set topology.nodes"))
    for i, ckpt in enumerate(model.get("checkpoints") or []):
        if not ckpt["revision"]:
            found.append(
                Problem(
                    f"model.checkpoints[{i}].revision",
                    f"{ckpt['repo']} is not pinned",
                    "it will be resolved to a commit once at download and recorded; pin it to be sure",
                    "warning",
                )
            )
        if ckpt.get("license") and "non-commercial" in ckpt["license"].lower():
            found.append(
                Problem(
                    f"model.checkpoints[{i}].license",
                    f"{ckpt['repo']} is licensed {ckpt['license']}",
                    "make sure your use is allowed",
                    "warning",
                )
            )
    # flags that run code that is not the engine's own, shown as what they are (a plugin file no pin covers is
    # a privileged request below)
    for flag, value in codepaths.code_flags(doc["serve"].get("args") or []):
        if flag not in codepaths.PLUGIN_FILES:
            found.append(
                Problem(
                    f"serve.args {flag}",
                    codepaths.CODE_FLAGS[flag].format(value=value or "(none)"),
                    "serve it only if you trust where that code comes from (the checkpoint's repository, the image)",
                    "warning",
                )
            )
    # shown, never refused here: the inventory may allow them (serve_allow); the plan refuses the others
    for request in boundary.requests(doc):
        found.append(
            Problem(
                request.key,
                f"privileged request: {request.what}",
                f"it runs only where the inventory allows it (serve_allow: [{request.name!r}])",
                "warning",
            )
        )
    return found


def errors(doc: dict[str, Any]) -> list[Problem]:
    return [p for p in problems(doc) if p.severity == "error"]


class _Dumper(yaml.SafeDumper):
    """yamllint-clean block style: indented sequences, long prose folded."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # folded (>) keeps prose under the line limit and round-trips exactly
    style = ">" if "\n" in value or len(value) > 100 else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def to_yaml(doc: dict[str, Any]) -> str:
    # the title is the recipe's own text: one line here, whatever it holds (a newline would end the comment)
    title = " ".join("".join(c if c.isprintable() else " " for c in str(doc["title"])).split())
    header = f"# {title}\n# sparkplay recipe ({SCHEMA_ID}); imported with `sparkplay recipe import`.\n"
    return header + "---\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


MAX_DEPTH = 32  # a recipe is a few levels deep; a parser recursing into more is an attack
MAX_VALUES = 100_000  # counted as expanded: YAML aliases can make 1 KiB mean a billion values


def check_shape(data: Any, where: str) -> None:
    """Refuse a parsed document nested too deeply or holding too many values (aliases expanded)."""
    budget = MAX_VALUES
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > MAX_DEPTH:
            what = f"more than {MAX_VALUES} values" if budget < 0 else f"nested more than {MAX_DEPTH} deep"
            raise BadInput(f"{where} is not a recipe: it holds {what}", "check the file; a recipe is small")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def parsed(parse: Callable[[], Any], where: str) -> Any:
    """`parse()` with a document too deep for the parser itself a one-line error, and the shape checked."""
    try:
        data = parse()
    except RecursionError:
        too_deep = BadInput(f"{where} is not a recipe: it is nested too deeply", "check the file; a recipe is small")
        raise too_deep from None
    check_shape(data, where)
    return data


def from_yaml(text: str, where: str) -> dict[str, Any]:
    try:
        doc = parsed(lambda: yaml.safe_load(text), where)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise BadInput(f"{where} is not valid YAML{at}", "fix the YAML syntax") from None
    if not isinstance(doc, dict):
        raise BadInput(f"{where} is not a recipe (a YAML mapping is expected)", "check the file")
    return doc
