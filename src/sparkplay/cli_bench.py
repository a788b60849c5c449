"""`sparkplay bench`: bench.yml on the leader, then the result kept, shown, charted and compared."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from sparkplay import bench as bench_mod
from sparkplay import inventory as inv_mod
from sparkplay import stack
from sparkplay.cli_common import InventoryOpt, ProjectOpt, err, out, reports_errors
from sparkplay.cli_run import VerboseOpt, finish, hosts_file, locked, run
from sparkplay.errors import BadInput, ExitCode
from sparkplay.paths import data_dir, project_dir
from sparkplay.recipes.store import catalog


def _file(flag: str, text: str) -> Any:
    return typer.Option(flag, exists=True, dir_okay=False, resolve_path=True, help=text)


RecipeArg = Annotated[str | None, typer.Argument(help="The recipe served (default: the one the inventory records).")]
ProfileOpt = Annotated[Path | None, _file("--profile", "YAML of pp, tg, depth, concurrency (lists), runs, ...")]
TokenizerOpt = Annotated[Path | None, _file("--tokenizer", "A tokenizer.json (default: the model's own).")]
CorpusOpt = Annotated[Path | None, _file("--corpus", "A text file for the prompts (default: one that ships).")]
ResultsOpt = Annotated[Path | None, typer.Option("--results", help="Where results go (default: <data>/results).")]
CompareOpt = Annotated[Path | None, _file("--compare", "An earlier result: print every rate's ratio to it.")]


def _recipe_of(inventory: Path, given: str | None) -> str:
    if given:
        return given
    name = inv_mod.recorded_recipe(inv_mod.hosts(hosts_file(inventory)))
    if not name:
        raise BadInput("no recipe given and the inventory records none", "pass the recipe: sparkplay bench RECIPE")
    return name


def _placement(inventory: Path | None, name: str) -> dict[str, str]:
    """Not the inventory's recipe (the primary's): an added deployment's, whose node count may be one."""
    return {} if name == inv_mod.recorded_recipe(inv_mod.hosts(hosts_file(inventory))) else {"serve_mode": "add"}


def _serving(root: Path, model: str) -> str:
    """The catalog's recipe whose served name is `model`."""
    folder = catalog.catalog_dir(root)
    found = [
        p.stem
        for p in sorted(folder.glob("*.yml"))
        if (catalog.load(folder, p.stem).get("model") or {}).get("served_name") == model
    ]
    if len(found) != 1:
        raise BadInput(
            f"--model {model}: {len(found)} recipes of the catalog serve that name",
            "name the recipe too: sparkplay bench RECIPE --model NAME",
        )
    return found[0]


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=None)
    for column in ("concurrency", "pp", "tg", "depth", "prompt tok/s", "generation tok/s", "first token ms"):
        table.add_column(column, justify="right")
    for row in rows:
        shape = (str(row[k]) for k in ("concurrency", "pp", "tg", "depth"))
        rates = (f"{row[k]:.1f}" if row[k] is not None else "-" for k in ("pp_tps", "tg_tps", "ttft_ms"))
        table.add_row(*shape, *rates)
    return table


@reports_errors
def bench(
    inventory: InventoryOpt = None,
    recipe: RecipeArg = None,
    profile: ProfileOpt = None,
    tokenizer: TokenizerOpt = None,
    corpus: CorpusOpt = None,
    results: ResultsOpt = None,
    compare: CompareOpt = None,
    model: Annotated[
        str | None, typer.Option("--model", help="The served model to measure (one of several: `sparkplay status`).")
    ] = None,
    verbose: VerboseOpt = 0,
    project: ProjectOpt = None,
) -> None:
    """Measure the served model (llama-benchy on the leader) and check its temperature-0 output is the
    same alone and among concurrent requests; keep the result, print a table, draw a chart."""
    root = project_dir(project)
    name = _recipe_of(inventory, recipe or (_serving(root, model) if model else None))
    chosen = catalog.load_for_use(catalog.catalog_dir(root), name)  # an unknown or invalid recipe fails before the run
    recipe_file = catalog.recipe_path(catalog.catalog_dir(root), name)
    earlier = bench_mod.load(compare) if compare else None  # a bad file fails before the run
    folder = (results or data_dir(root) / "results").resolve()
    extra: dict[str, Any] = {"recipe": name, "bench_fetch_to": str(folder / ".incoming"), "bench_model": model or ""}
    extra.update(_placement(inventory, name))
    # a profile given wins; else the recipe's own (its source's benchmark block), else the playbook's defaults
    if profile:
        extra.update(bench_mod.load_profile(profile))
    elif chosen.get("bench"):
        extra.update(bench_mod.profile_variables(chosen["bench"], f"recipe {name}'s bench profile"))
    extra.update({k: str(v) for k, v in (("bench_tokenizer", tokenizer), ("bench_corpus", corpus)) if v})
    result = run(root, "bench.yml", hosts_file(inventory), f"bench {name}", verbose=verbose, **extra)
    stats = result.custom.get("sparkplay_bench")
    if result.exit_code != ExitCode.OK or not stats:
        finish(result, f"bench {name}")
        raise typer.Exit(int(ExitCode.FAILED))
    fetched = Path(stats["file"])
    doc = bench_mod.load(fetched)
    recipe_sha256 = bench_mod.digest(recipe_file.read_bytes())
    # the stack it ran on: the inventory's lock (its hash names it) and what drifted from it during the run
    doc["stack_lock"] = locked(hosts_file(inventory))
    doc["stack_lock_hash"] = stack.lock_hash(doc["stack_lock"])
    doc["pins"] = stack.pins(doc["stack_lock"])  # the receipt's pins: driver, CUDA, NCCL by bytes, image, revision
    doc["stack_drift"] = (result.custom.get("sparkplay_drift") or {}).get("lines") or []
    kept = bench_mod.save(
        doc, folder, recipe=name, stamp=fetched.stem, recipe_sha256=recipe_sha256, engine_build=stats["engine_build"]
    )
    fetched.unlink()
    rows = bench_mod.rows(doc)
    out.print(_table(rows))
    chart = bench_mod.chart(rows, kept.with_suffix(".png"), f"{name} ({doc['engine_build'][:70]})")
    out.print(f"result: {kept}\nchart: {chart}", markup=False, highlight=False)
    latency = doc.get("latency") or {}
    if "overhead_ms" in latency:
        said = (
            f"client overhead at concurrency 1: {latency['overhead_ms']} ms "
            f"(llama-benchy {latency['benchy_ms']} ms, a bare request {latency['bare_ms']} ms)"
        )
        out.print(said, markup=False, highlight=False)
    said = f"stack: {doc['stack_lock_hash']}" if doc["stack_lock_hash"] else "stack: not locked (`sparkplay lock`)"
    out.print(said + "".join(f"\n  drifted: {line}" for line in doc["stack_drift"]), markup=False, highlight=False)
    if earlier is not None:
        for line in stack.compare_locks(doc["stack_lock"], earlier.get("stack_lock")):
            out.print(line, markup=False, highlight=False)
        for line in bench_mod.compare(rows, bench_mod.rows(earlier)):
            c, pp, tg, depth = line["shape"]
            out.print(
                f"c{c} pp{pp} tg{tg} d{depth} {line['rate']}: {line['now']} vs {line['before']} = x{line['ratio']}",
                markup=False,
                highlight=False,
            )
    check = doc["invariance"]
    if not check["identical"]:
        for d in check["differences"]:
            where = d.get("why") or f"{check['unit']} {d['position']}: {d['alone']!r} alone, {d['among']!r} among"
            err.print(
                f"output differs at concurrency {d['concurrency']} for {d['prompt']!r}: {where}",
                markup=False,
                highlight=False,
            )
        err.print(
            "temperature-0 output changed among concurrent requests (a batch-variant engine): see above",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(int(ExitCode.FAILED))
    levels = ", ".join(map(str, check["levels"])) or "none above 1"
    out.print(
        f"invariance: {check['prompts']} prompts gave the same {check['unit']}s alone and at concurrency {levels}",
        markup=False,
        highlight=False,
    )
