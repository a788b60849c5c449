"""`run-recipe.sh RECIPE [options] [-- vLLM args]` (eugr's spark-vllm-docker, run-recipe.py): the recipe YAML it
names, read by sparkplay's sparkrun/eugr importer, with the wrapper's overrides applied as run-recipe.py applies
them (read from its source): `--port`, `--host`, `--tp`, `--gpu-mem`, `--max-model-len` replace the recipe's
`defaults` (its command's placeholders); `-t IMAGE` its container; `-e VAR=VALUE` adds to its environment;
`--solo` runs it on one node without `--distributed-executor-backend`; what follows `--`, and any option the
wrapper does not know (argparse's parse_known_args), is appended to the vLLM command. The recipe is looked
for as run-recipe.py looks: the path, with .yaml or .yml, then in `recipes/` beside the wrapper. The launch
options sparkplay decides itself (nodes, build, download, container name, interfaces) are named as not
applied.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparkplay.errors import BadInput
from sparkplay.recipes import model
from sparkplay.recipes.importers.sparkrun import recipe as sparkrun
from sparkplay.recipes.raw import RawRecipe

OVERRIDES = {
    "--port": "port",
    "--host": "host",
    "--tensor-parallel": "tensor_parallel",
    "--tp": "tensor_parallel",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--gpu-mem": "gpu_memory_utilization",
    "--max-model-len": "max_model_len",
}
NUMBERS = {"port": int, "tensor_parallel": int, "gpu_memory_utilization": float, "max_model_len": int}
# run-recipe.py's options that take a value and that sparkplay decides itself
VALUED = set(
    "-n --nodes --nccl-debug --master-port --head-port --name --eth-if --ib-if -j --mem-limit-gb "
    "--mem-swap-limit-gb --pids-limit --shm-size-gb --config".split()
)
SWITCHES = set(
    "--setup --build-only --download-only --force-build --force-download --dry-run -d --daemon --no-cache-dirs "
    "--non-privileged -l --list --discover --show-env".split()
)


@dataclass
class Wrapped:
    recipe: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    container: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    solo: bool = False
    no_ray: bool = False
    extra: list[str] = field(default_factory=list)
    not_applied: list[str] = field(default_factory=list)


def parse(args: list[str], at: str) -> Wrapped:
    """The wrapper's words after its program, as run-recipe.py's parser reads them."""
    got, words = Wrapped(), list(args)
    while words:
        word = words.pop(0)
        if word == "--":
            got.extra += words
            break
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        value = _taker(name, inline if eq else None, words, at)
        if name in OVERRIDES:
            key, raw = OVERRIDES[name], value()
            try:
                got.defaults[key] = NUMBERS[key](raw) if key in NUMBERS else raw
            except ValueError:
                raise BadInput(f"{at}: run-recipe's {name} {raw!r} is not a number", f"give {name} a number") from None
        elif name in ("-t", "--container"):
            got.container = value()
        elif name in ("-e", "--env"):
            pair = value()
            key, sep, val = pair.partition("=")
            if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise BadInput(f"{at}: run-recipe's -e {pair!r} is not VAR=VALUE", "write it as -e NAME=VALUE")
            got.env[key] = val
        elif name == "--solo":
            got.solo = True
        elif name == "--no-ray":
            got.no_ray = True
        elif name in VALUED:
            got.not_applied.append(f"{name} {value()}")
        elif name in SWITCHES:
            got.not_applied.append(name)
        elif word.startswith("-"):
            got.extra.append(word)  # parse_known_args: an option it does not know goes to vLLM
        elif got.recipe is None:
            got.recipe = word
        else:
            got.extra.append(word)
    return got


def _taker(name: str, inline: str | None, words: list[str], at: str) -> Any:
    """The option's value when asked for: after its `=`, else the next word (taken from `words`)."""

    def value() -> str:
        if inline is not None:
            return inline
        if not words:
            raise BadInput(f"{at}: run-recipe's {name} needs a value", f"give it one: {name} VALUE")
        return words.pop(0)

    return value


def candidates(recipe: str, folder: Path) -> list[Path]:
    """Where run-recipe.py looks for RECIPE (its load_recipe), from the wrapper's folder."""
    path = folder / recipe
    recipes = folder / "recipes"
    return [
        path,
        Path(f"{path}.yaml"),
        Path(f"{path}.yml"),
        recipes / path.name,
        recipes / f"{path.name}.yaml",
        recipes / f"{path.name}.yml",
        recipes / f"{path.stem}.yaml",
    ]


def locate(wrapped: Wrapped, where: str, at: str) -> Path:
    folder = Path(where).parent if "://" not in where else None
    name = wrapped.recipe
    if name is None:
        raise BadInput(f"{at} runs run-recipe with no recipe", "import the recipe YAML it should run")
    if folder is not None and not Path(name).is_absolute() and ".." not in Path(name).parts:
        for path in candidates(name, folder):
            if path.is_file():
                return path
    raise BadInput(
        f"{at} runs run-recipe on the recipe {name}, which is not beside {where} (looked as run-recipe.py looks: "
        "the path, with .yaml or .yml, then in recipes/)",
        "import the recipe file it names, or import the wrapper from the checkout that holds it",
    )


def apply(doc: dict[str, Any], wrapped: Wrapped) -> tuple[dict[str, Any], list[str]]:
    """The recipe as the wrapper runs it, and what that changed, in words."""
    doc = dict(doc)
    said: list[str] = []
    if wrapped.solo and "tensor_parallel" not in wrapped.defaults:  # run-recipe.py: solo is TP 1 unless --tp
        wrapped.defaults["tensor_parallel"] = 1
    if wrapped.defaults:
        doc["defaults"] = {**(doc.get("defaults") or {}), **wrapped.defaults}
        said.append("the wrapper sets " + ", ".join(f"{k}={v}" for k, v in wrapped.defaults.items()))
    if wrapped.container:
        doc["container"] = wrapped.container
        said.append(f"the wrapper runs the container {wrapped.container}")
    if wrapped.env:
        doc["env"] = {**(doc.get("env") or {}), **wrapped.env}
        said.append("the wrapper adds to the environment: " + ", ".join(sorted(wrapped.env)))
    command = str(doc.get("command") or "")
    if wrapped.solo or wrapped.no_ray:
        command = re.sub(r"--distributed-executor-backend\s+\S+", "", command)
    if wrapped.solo:
        doc["solo_only"] = True
        doc.pop("cluster_only", None)
        said.append("--solo: one node, tensor parallel 1 unless --tp, no --distributed-executor-backend")
    elif wrapped.no_ray:
        said.append("--no-ray: without --distributed-executor-backend (PyTorch's distributed back end)")
    if wrapped.extra:
        command = command.rstrip().rstrip("\\").rstrip() + " " + " ".join(shlex.quote(a) for a in wrapped.extra)
        said.append("the wrapper appends to the command: " + shlex.join(wrapped.extra))
    doc["command"] = command
    if wrapped.not_applied:
        said.append(
            "not applied, as sparkplay decides them (its inventory, its own build, download and units): "
            + ", ".join(wrapped.not_applied)
        )
    return doc, said


def to_raw(wrapped: tuple[list[str], str], source: dict[str, Any], name: str | None, where: str) -> RawRecipe:
    """`run-recipe.sh RECIPE ...` at `where`: the recipe file it names, beside it, as the wrapper runs it."""
    args, at = wrapped
    read = parse(args, at)
    path = locate(read, where, at)
    doc = model.parsed(lambda: yaml.safe_load(path.read_text(encoding="utf-8")), str(path))
    if not sparkrun.is_sparkrun(doc):
        raise BadInput(f"{path} (run by {at}) is not a recipe run-recipe reads", "import the recipe file it names")
    doc, said = apply(doc, read)
    raw = sparkrun.to_raw(doc, {**source, "launch": f"{at}: {path}"}, name, str(path))
    for words in [f"read through {at}: run-recipe on {path}", *said]:
        raw.note("serve.args", "derived", words)
    return raw
