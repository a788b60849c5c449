"""The sparkplay package's import graph has no circle (late imports inside functions count too)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            while target and target not in known:  # `from a.b import c` names a.b.c or something in a.b
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (circle := visit(nxt)):
                return circle
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (circle := visit(name)):
            return circle
    return None


def package_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    return {name: imports_of(path, name, set(files)) for name, path in files.items()}


def test_no_import_circle():
    graph = package_graph()
    assert "sparkplay.engines.context" in graph["sparkplay.engines.vllm.plan"]  # the walk reads real imports
    assert "sparkplay.nodetools.ckpt.paths" in graph["sparkplay.nodetools.ckpt.sink"]  # relative ones too
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_walk_finds_a_late_import_circle(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from pkg import b\n")
    (tmp_path / "b.py").write_text("from pkg.a import f\n")
    known = {"pkg.a", "pkg.b"}
    graph = {
        "pkg.a": imports_of(tmp_path / "a.py", "pkg.a", known),
        "pkg.b": imports_of(tmp_path / "b.py", "pkg.b", known),
    }
    assert find_circle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


PACKAGES = {module_name(p) for p in SRC.rglob("__init__.py")}
# an engine package's spec, the spec base and the registry: the recipe side of the engines (engines/spec.py)
ENGINE_SPECS = "sparkplay.engines (specs)"

# The package's layers, lowest first: a module imports only from its own layer or below ("no import back up").
# A subpackage is one unit (sparkplay.recipes, sparkplay.engines, ...); a top-level module is its own.
LAYERS = [
    {"sparkplay", "sparkplay.errors", "sparkplay.plays", "sparkplay.probed"},
    {
        "sparkplay.addresses",
        "sparkplay.fsutil",
        "sparkplay.paths",
        "sparkplay.topology",
        "sparkplay.fabric",
        "sparkplay.boundary",
        "sparkplay.codepaths",
        "sparkplay.imageref",
        "sparkplay.checkpoints",
        "sparkplay.hostfacts",
        "sparkplay.runner",
        "sparkplay.runlock",
        "sparkplay.integrity",
        "sparkplay.varsfile",
        "sparkplay.bench",
        "sparkplay.nvfp4",
        "sparkplay.kvcache",
        "sparkplay.nodetools",
        "sparkplay.stack",
        "sparkplay.argv",
        ENGINE_SPECS,  # each engine's recipe side, which the formats and the small rules read
    },
    {"sparkplay.managed", "sparkplay.inventory", "sparkplay.recipes"},  # formats: read and normalise, never plan
    {"sparkplay.engines"},  # the per-rank launch plans
    # the run's plan; what fits; what serves; what a rank lays on its node
    {
        "sparkplay.deployment",
        "sparkplay.admission",
        "sparkplay.served",
        "sparkplay.node_memory",
        "sparkplay.layout",
        "sparkplay.stopping",
        "sparkplay.settings",
    },
    {"sparkplay.rollback"},  # a way back checked as a plan is: admission over the records read back
    {"sparkplay.importing", "sparkplay.doctor", "sparkplay.lab"},
    {"sparkplay.cli_common", "sparkplay.cli_display", "sparkplay.cli_status"},
    {"sparkplay.soak"},  # the lab soak's load and report against a real inventory (status read as the CLI reads it)
    {"sparkplay.cli_run", "sparkplay.cli_recipes", "sparkplay.cli_overlay", "sparkplay.cli_bench"},
    {"sparkplay.cli_soak"},
    {"sparkplay.cli_day2", "sparkplay.cli_lock"},  # day two, on the run helpers
    {"sparkplay.cli"},
    {"sparkplay.__main__"},
]


def unit_of(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["sparkplay", "engines"] and (
        parts[-1] in ("spec", "registry") or module in PACKAGES  # the engines' package inits hold no code
    ):
        return ENGINE_SPECS
    return ".".join(parts[:2])


def test_every_import_goes_down_the_layers():
    graph = package_graph()
    layer = {unit: i for i, units in enumerate(LAYERS) for unit in units}
    units = {unit_of(name) for name in graph}
    assert units == set(layer), (
        f"units without a layer: {sorted(units - set(layer))}; gone: {sorted(set(layer) - units)}"
    )
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if layer[unit_of(target)] > layer[unit_of(name)]
    )
    assert upward == [], "imports back up: " + "; ".join(upward)


def test_the_node_bundles_hold_every_module_they_import():
    """The converter runs on a node from a bundle of files: a module it imports but the bundle lacks would
    fail there only (at `overlay.yml`), so every sparkplay import of a bundled file is bundled too."""
    from sparkplay.nodetools import BUNDLES

    package = SRC / "sparkplay"
    for name, files in BUNDLES.items():
        bundled = {f[: -len(".py")].replace("/", ".").removesuffix(".__init__") for f in files if f.endswith(".py")}
        bundled = {f"sparkplay.{m}" if m != "__init__" else "sparkplay" for m in bundled}
        for rel in (f for f in files if f.endswith(".py")):
            tree = ast.parse((package / rel).read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sparkplay"):
                    targets = [node.module]
                    targets += [
                        f"{node.module}.{a.name}"
                        for a in node.names
                        if (
                            package
                            / node.module.removeprefix("sparkplay").strip(".").replace(".", "/")
                            / f"{a.name}.py"
                        ).is_file()
                    ]
                    modules = [
                        t
                        for t in targets
                        if t in bundled
                        or (package / (t.removeprefix("sparkplay").strip(".").replace(".", "/") + ".py")).is_file()
                    ]
                    missing = [t for t in modules if t not in bundled]
                    assert not missing, f"bundle {name}: {rel} imports {missing}, which it lacks"


def test_no_module_of_the_package_or_its_plugins_is_over_400_lines():
    """Small modules named for what they hold: the package and the Ansible plugins (the test modules that
    share one lab stay whole: splitting one would build a second lab)."""
    project = SRC.parent
    files = [
        *SRC.joinpath("sparkplay").rglob("*.py"),
        *project.joinpath("plugins").rglob("*.py"),
        *project.joinpath("benchmarks").rglob("*.py"),
    ]
    long = {str(p.relative_to(project)): n for p in files if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"over 400 lines: {long}"


# sparkplay.recipes inside: the model and its rules, then one importer per format, then the catalog and fetch
RECIPE_LAYERS = ["sparkplay.recipes", "sparkplay.recipes.importers", "sparkplay.recipes.store"]


def recipe_layer(module: str) -> int:
    return max(i for i, prefix in enumerate(RECIPE_LAYERS) if module == prefix or module.startswith(prefix + "."))


def test_the_recipe_model_imports_no_importer_and_no_importer_the_catalog():
    graph = {n: ts for n, ts in package_graph().items() if n.startswith("sparkplay.recipes")}
    assert "sparkplay.recipes.importers.sparkrun.recipe" in graph and "sparkplay.recipes.store.catalog" in graph
    upward = sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if target.startswith("sparkplay.recipes") and recipe_layer(target) > recipe_layer(name)
    )
    assert upward == [], "recipe modules importing back up: " + "; ".join(upward)
    # what sits at the top is the model and its rules; a new importer or store module goes in its folder
    top = sorted(n.rpartition(".")[2] for n in graph if n.count(".") == 2)
    model = [
        "cmdline",
        "diff",
        "flags",
        "hooks",
        "importers",
        "known",
        "model",
        "model_source",
        "mods",
        "normalise",
        "raw",
        "secrets",
        "store",
    ]
    assert top == model, top


def test_the_formatter_decides_the_layout_everywhere():
    """No module opts out of the formatter (issue 42): a table that reads badly formatted is restructured, a
    module the formatter would push over 400 lines is split."""
    project = SRC.parent
    marker = "fmt: " + "skip", "fmt: " + "off"  # spelled apart, so this file holds neither
    files = [
        p
        for d in ("src", "plugins", "tests", "benchmarks", "scripts", "molecule")
        for p in project.joinpath(d).rglob("*.py")
    ]
    walls = sorted(str(p.relative_to(project)) for p in files if any(m in p.read_text() for m in marker))
    assert not walls, f"formatter opted out in: {walls}"
