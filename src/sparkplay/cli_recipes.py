"""`sparkplay recipe ...` and `sparkplay apply`: thin commands over sparkplay.recipes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from sparkplay import importing
from sparkplay.cli_common import (
    InventoryOpt,
    NoWaitOpt,
    ProjectOpt,
    changes_nodes,
    err,
    inventory_of,
    out,
    reports_errors,
)
from sparkplay.cli_common import confirm as ask_terminal
from sparkplay.errors import BadInput, Declined, ExitCode
from sparkplay.paths import project_dir
from sparkplay.recipes import model
from sparkplay.recipes.diff import semantic_diff
from sparkplay.recipes.store import apply as apply_mod
from sparkplay.recipes.store import catalog, choices

recipe_app = typer.Typer(help="Import, list, show, validate and compare recipes (the catalog in recipes/).")

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Answer yes to replacing what exists (it is backed up).")]
ArgOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--arg",
        metavar="VALUE",
        help="An argument the script is run with, in order (a launcher's profile: --arg recipes/model.env); "
        "repeatable. Without it a script is read as run with none, its defaults taken.",
    ),
]


def make_confirm(yes: bool) -> catalog.Confirm:
    """Ask on the terminal; --yes says yes; no terminal and no --yes says no."""

    def confirm(question: str, lines: list[str], path: Path) -> bool:
        out.print(f"{path} exists with other content:", markup=False, highlight=False)
        for line in lines:
            out.print(f"  {line}", markup=False, highlight=False)
        if yes:
            return True
        if not sys.stdin.isatty():
            raise Declined(
                f"{path} exists with other content and there is no terminal to ask on",
                "rerun with --yes to replace it (the old one is backed up)",
            )
        return ask_terminal(question)

    return confirm


def _load_any(project: Path, ref: str) -> dict[str, Any]:
    """A catalog name, or a path to a recipe YAML file."""
    path = Path(ref)
    if path.suffix in (".yml", ".yaml") and path.is_file():
        return model.from_yaml(path.read_text(), ref)
    return catalog.load(catalog.catalog_dir(project), ref)


@recipe_app.command("import")
@reports_errors
def recipe_import(
    source: Annotated[
        str,
        typer.Argument(
            help="An https URL, a file, or - for standard input: a recipe (website "
            "JSON, recipe.toml, sparkrun or sparkplay YAML), a command line or "
            "script, a docker compose file, or a page (Markdown or HTML)."
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="Save under this name (default: from the recipe); with "
            "several compose services, the prefix of each one's name.",
        ),
    ] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Fill or correct a field the recipe leaves out or gets wrong (dotted key, e.g. engine.image=REPO:TAG, "
            "model.revision=COMMIT, serve.bind=0.0.0.0); repeatable.",
        ),
    ] = None,
    pick: Annotated[
        int | None,
        typer.Option(
            "--pick",
            min=1,
            metavar="N",
            help="The Nth engine command of a page or "
            "script that holds several (the error lists them), or one service of "
            "a compose file.",
        ),
    ] = None,
    arguments: ArgOpt = None,
    mods_from: Annotated[
        list[Path] | None,
        typer.Option(
            "--mods-from",
            metavar="DIR",
            help="A folder of sparkrun mods to look in after the recipe's own registry (e.g. a checkout of eugr's "
            "spark-vllm-docker/mods, sparkrun's fallback); repeatable. Each mod found is a privileged request.",
        ),
    ] = None,
    yes: YesOpt = False,
    project: ProjectOpt = None,
) -> None:
    """Import a recipe into recipes/NAME.yml; asks before replacing a different one.

    The format is read from the content: a recipe website's JSON, a launcher recipe.toml, a sparkrun
    or sparkplay recipe YAML, a command line or script (vllm serve, python -m sglang.launch_server,
    llama-server, spark serve, trtllm-serve, with docker run/exec around them), a docker compose file (each engine
    service a recipe), a llama-swap config (each model), a Kubernetes manifest (each engine container), a
    systemd unit, or a page whose code blocks hold the command.
    """
    root = project_dir(project)
    docs = importing.import_sources(
        source, name=name, sets=sets or (), mods_from=mods_from or (), pick=pick, arguments=arguments or ()
    )
    said: set[str] = set()  # what the recipes of a text's choices share (a choice not imported): said once
    saved = [_save_one(root, doc, yes, said) for doc in docs]
    if choices.is_choice(docs[0]):  # a page's or a script's choices: each serves alone, or beside another (--add)
        out.print(
            f"{source} holds several engine commands, each a choice: serve one with sparkplay up NAME -i "
            f"INVENTORY, NAME one of {', '.join(saved)}",
            markup=False,
        )
    elif len(saved) > 1:  # a compose file's services, a llama-swap config's models: the first the primary
        out.print(
            f"serve them: sparkplay up {saved[0]} -i INVENTORY, then "
            + ", ".join(f"sparkplay up {n} --add -i INVENTORY" for n in saved[1:]),
            markup=False,
        )


def _save_one(root: Path, doc: dict[str, Any], yes: bool, said: set[str]) -> str:
    result = catalog.save(catalog.catalog_dir(root), doc, make_confirm(yes))

    def shown(path: Path) -> Path:  # a checkout's recipes/ as before; an installed sparkplay's in full
        return path.relative_to(root) if path.is_relative_to(root) else path

    where = shown(result.path)
    if result.action == "unchanged":
        out.print(f"{where}: unchanged", markup=False)
    else:
        backup = f" (previous kept as {shown(result.backup)})" if result.backup else ""
        out.print(f"{where}: {result.action}{backup}", markup=False)
    for problem in model.problems(doc):
        err.print(str(problem), markup=False, highlight=False)
    for note in doc.get("provenance") or []:
        if note.get("how") in ("narrowed", "overridden", "added", "pinned"):
            line = f"note: {note['key']}: {note['detail']}"
        elif note.get("how") == "ignored":
            kept = " (kept in the recipe's extra)" if note["key"].startswith("extra.") else ""
            line = f"not honoured: {note['key']}: {note['detail']}{kept}"
        else:
            continue
        if note["key"] != choices.KEY or line not in said:
            said.add(line)
            err.print(line, markup=False, highlight=False)
    return str(doc["name"])


@recipe_app.command("list")
@reports_errors
def recipe_list(project: ProjectOpt = None) -> None:
    """List the recipes in the catalog."""
    cat = catalog.catalog_dir(project_dir(project))
    table = Table(title="recipes")
    for column in ("name", "engine", "model", "quant", "context", "nodes", "title"):
        table.add_column(column)
    broken: list[str] = []
    for name in catalog.names(cat):
        try:
            doc = catalog.load(cat, name)
        except BadInput as exc:
            broken.append(str(exc))
            continue
        invalid = model.schema_errors(doc)
        if invalid:  # one bad file must not hide the rest of the catalog
            broken.append(f"{catalog.recipe_path(cat, name)}: {invalid[0]}")
            continue
        table.add_row(
            name,
            doc["engine"]["name"],
            str(doc["model"]["repo"]),
            str(doc["model"]["quant"]),
            str(doc["context_length"]),
            str(doc["topology"]["nodes"]),
            doc["title"],
        )
    out.print(table)
    for line in broken:
        err.print(
            f"error: {line}; fix the file or remove it (sparkplay recipe validate NAME says more)",
            markup=False,
            highlight=False,
        )
    if broken:
        raise typer.Exit(int(ExitCode.BAD_INPUT))


@recipe_app.command("show")
@reports_errors
def recipe_show(
    name: Annotated[str, typer.Argument(help="A catalog name or a recipe .yml path.")],
    fmt: Annotated[str, typer.Option("--format", help="yaml or json.")] = "yaml",
    project: ProjectOpt = None,
) -> None:
    """Print the normalised recipe."""
    if fmt not in ("yaml", "json"):
        raise BadInput(f"--format {fmt} is not known", "use --format yaml or --format json")
    doc = _load_any(project_dir(project), name)
    invalid = model.schema_errors(doc)
    if invalid:
        raise BadInput(f"recipe {name} is not well formed: {invalid[0]}", f"fix it (sparkplay recipe validate {name})")
    text = json.dumps(doc, indent=2) if fmt == "json" else model.to_yaml(doc)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


@recipe_app.command("validate")
@reports_errors
def recipe_validate(
    name: Annotated[str, typer.Argument(help="A catalog name or a recipe .yml path.")],
    project: ProjectOpt = None,
) -> None:
    """Check a recipe: well formed, and complete enough to deploy (exit 2 if not)."""
    doc = _load_any(project_dir(project), name)
    found = model.problems(doc)
    for problem in found:
        out.print(str(problem), markup=False, highlight=False)
    errors = [p for p in found if p.severity == "error"]
    if errors:
        raise BadInput(f"recipe {name} has {len(errors)} error(s)", "set the keys named above")
    out.print(f"recipe {name}: ok", markup=False)


@recipe_app.command("diff")
@reports_errors
def recipe_diff(
    old: Annotated[str, typer.Argument(help="A catalog name or a recipe .yml path.")],
    new: Annotated[str, typer.Argument(help="A catalog name or a recipe .yml path.")],
    project: ProjectOpt = None,
) -> None:
    """What differs between two recipes for a deployment: engine, model, context, topology, flags, env."""
    root = project_dir(project)
    lines = semantic_diff(_load_any(root, old), _load_any(root, new))
    for line in lines or ["no differences in engine, model, context, topology, flags or env"]:
        out.print(line, markup=False, highlight=False)


@reports_errors
@changes_nodes
def apply(
    recipe: Annotated[str, typer.Argument(help="A recipe name from the catalog.")],
    inventory: InventoryOpt = None,
    knob: Annotated[
        list[str] | None, typer.Option("--set", help="KNOB=VALUE, e.g. gpu_memory_utilization=0.9 (repeatable).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be recorded; change nothing.")] = False,
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
    project: ProjectOpt = None,
) -> None:
    """Record the recipe (and knob values) the inventory serves, asking before replacing another choice."""
    root = project_dir(project)
    inventory = inventory_of(inventory)
    result = apply_mod.record(root, recipe, inventory, knob or [], make_confirm(yes), dry_run=dry_run)
    out.print(f"{result.path}: {result.action}", markup=False, highlight=False)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False, highlight=False)
    if result.action.startswith("would"):
        for line in result.diff:
            out.print(f"  {line}", markup=False, highlight=False)
    if result.backup:
        out.print(f"previous kept as {result.backup}", markup=False, highlight=False)
    # The seam: serving this recipe is the serve playbook's job (ansible-playbook serve.yml).
    if not dry_run:
        out.print(f"next: ansible-playbook -i {inventory} serve.yml", markup=False, highlight=False)
