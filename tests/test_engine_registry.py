"""An engine is one package: the registry finds it, and nothing outside `sparkplay/engines/` names an engine.

The toy engine below lives in a temporary folder added to the engines package's path for one test: it is
imported from a pasted command line, planned on two ranks and admitted beside a served deployment with no
file of the tree changed (the test checks the tree's files are the same before and after)."""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import sparkplay.engines
from sparkplay import admission, deployment, importing
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline
from tests.conftest import PROJECT
from tests.test_deployment import facts_of
from tests.test_several import hosts, record_of, staged

SRC = PROJECT / "src" / "sparkplay"

TOY_SPEC = '''
"""A toy engine: `toy-serve MODEL --shards N --max-context T --name NAME`."""

from sparkplay import argv
from sparkplay.engines.spec import Defaults, EngineSpec, split_model


class Toy(EngineSpec, name="toy", title="Toy", command="toy-serve MODEL"):
    defaults = Defaults(runtime="docker", port=7070, health_timeout_s=60)
    context_flags = ("--max-context",)
    field_flags = {
        "tensor_parallel": ("--shards",),
        "port": ("--port",),
        "bind": ("--listen",),
        "served_name": ("--name",),
    }
    images = ("example.org/toy",)

    def recognise(self, program, rest):
        return split_model(rest) if program == "toy-serve" else None


SPEC = Toy()
'''

TOY_PLAN = '''
"""The toy engine's ranks: one container each, rank 0 serving the API, the others joining it."""

from sparkplay.engines.context import engine_args, gpu_container_options, with_served_name


def plan(ctx):
    recipe = ctx.recipe
    args = with_served_name(engine_args(recipe, ("--port", "--listen"), ("--join",), "toy"), recipe, "--name")
    model = ctx.checkpoint_dir("target")
    join = ctx.rendezvous(7700)
    ranks = []
    for node in ctx.nodes:
        lead = node.leads
        where = ["--listen", ctx.bind, "--port", str(ctx.port)] if lead else ["--join", f"{ctx.leader.address}:{join}"]
        ranks.append(
            {
                "rank": node.rank,
                "host": node.host,
                "role": "leader" if lead else "worker",
                "argv": ["toy-serve", model, *args, *where],
                "env": dict(recipe["serve"]["env"]),
                "mounts": [{"source": ctx.model_root, "target": ctx.model_root, "readonly": True}],
                "container_options": gpu_container_options(recipe["serve"].get("shm_size"), len(ctx.nodes) == 1),
                "files": [],
                "listen": [{"address": ctx.bind, "port": ctx.port}] if lead else [],
                "peer_ports": [join] if lead else [],
                "wait_for": [],
            }
        )
    return {"ranks": ranks, "workers_follow_leader": True, "directories": [], "requires": []}
'''


def tree_digest() -> str:
    """Every file of the package and the project's recipes, hashed: the toy engine must change none."""
    digest = hashlib.sha256()
    for path in sorted([*SRC.rglob("*.py"), *SRC.rglob("*.json"), *(PROJECT / "recipes").glob("*.yml")]):
        if "__pycache__" not in path.parts:
            digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def toy_engine(tmp_path: Path) -> Iterator[Path]:
    package = tmp_path / "engines" / "toy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""A toy engine, added by a test."""\n')
    (package / "spec.py").write_text(textwrap.dedent(TOY_SPEC))
    (package / "plan.py").write_text(textwrap.dedent(TOY_PLAN))
    sparkplay.engines.__path__.append(str(package.parent))
    try:
        yield package
    finally:
        sparkplay.engines.__path__.remove(str(package.parent))
        for name in [m for m in sys.modules if m.startswith("sparkplay.engines.toy")]:
            del sys.modules[name]


def test_a_toy_engine_added_as_one_package_imports_plans_and_admits(toy_engine: Path, tmp_path: Path) -> None:
    before = tree_digest()
    assert "toy" in registry.names() and registry.spec("toy").title == "Toy"
    pasted = tmp_path / "toy.sh"
    pasted.write_text("toy-serve example-org/toy-7b --shards 2 --max-context 8192 --name toy7b\n")
    doc = importing.import_source(str(pasted), sets=("engine.image=example.org/toy:1.0",))
    assert doc["engine"]["name"] == "toy" and doc["engine"]["runtime"] == "docker"
    assert doc["model"]["repo"] == "example-org/toy-7b" and doc["model"]["served_name"] == "toy7b"
    assert doc["context_length"] == 8192 and doc["topology"]["tensor_parallel"] == 2
    assert doc["topology"]["nodes"] == 2 and doc["serve"]["port"] == 7070  # the spec's own default port

    doc["model"]["checkpoints"][0]["revision"] = "0" * 40
    # the registry's trusted images hold the toy's own (the project's default list is read once, at start)
    settings = {"serve_mode": "add", "serve_trusted_images": list(registry.trusted_images())}
    assert "example.org/toy" in settings["serve_trusted_images"]
    one = deployment.compute(doc, {"rank0": 0, "rank1": 1}, settings)
    launch = deployment.with_launch(one, doc, facts_of(2), settings)["launch"]
    leader, worker = launch["ranks"]
    assert leader["argv"][:2] == ["toy-serve", one["checkpoints"][0]["dest"]] and "--max-context" in leader["argv"]
    assert "--join" in worker["argv"] and worker["exec"][-len(worker["argv"]) :] == worker["argv"]
    assert launch["image"] == "example.org/toy:1.0" and launch["served_name"] == "toy7b"

    primary = staged("lab-tiny")["launch"]
    found = record_of(primary, {h: {"bytes": 10 * 2**30, "how": "x"} for h in ("rank0", "rank1")})
    got = admission.decide(launch, hosts(weights=8 * 2**30), found)
    assert got["checked"] and set(got["claims"]) == {"rank0", "rank1"}
    assert got["claims"]["rank0"]["bytes"] == 4 * 2**30 + registry.spec("toy").overhead_bytes  # half the weights
    assert tree_digest() == before


def test_without_its_package_the_engine_is_unknown_and_the_error_names_those_known() -> None:
    assert "toy" not in registry.names()
    with pytest.raises(BadInput) as refused:
        cmdline.parse("toy-serve example-org/toy-7b")
    assert "toy-serve" in str(refused.value)
    assert all(spec.command_help in refused.value.fix for spec in registry.specs().values())
    with pytest.raises(BadInput, match="engine 'toy' is not one sparkplay knows; use one of atlas, llamacpp"):
        registry.spec("toy")


def test_every_engine_package_holds_a_spec_and_a_plan() -> None:
    for name, spec in registry.specs().items():
        assert (SRC / "engines" / name / "plan.py").is_file(), name
        assert spec.name == name and spec.title and spec.defaults.port > 0
    assert json.dumps(sorted(registry.names())) == json.dumps(registry.names())


# Modules that read a foreign format whose own vocabulary names engines (sparkrun's runtimes, the launcher's
# engine field, an image's entrypoint): what each says of an engine is the format's, read where the format is.
# Everything else asks the registry.
FOREIGN_VOCABULARY = {
    "recipes/importers/sparkrun/fields.py",
    "recipes/importers/sparkrun/flags.py",
    "recipes/importers/sparkrun/recipe.py",
    "recipes/importers/sparkrun/rules.py",
    "recipes/importers/launcher.py",
    "recipes/importers/pasted/launches.py",
}


def names_an_engine(path: Path, engines: set[str]) -> list[int]:
    """The lines where a string literal is exactly an engine's name (docstrings and comments are prose)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in engines and id(node) not in docstrings
    ]


def test_nothing_outside_the_engine_packages_names_an_engine() -> None:
    engines = set(registry.names())
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        if rel.split("/")[:2] in (["engines", name] for name in engines) or rel in FOREIGN_VOCABULARY:
            continue
        if rel.startswith("nvfp4/") or rel == "cli_overlay.py":
            continue  # "atlas" there is a quantisation scheme's name (Atlas's rules for NVFP4), not the engine
        if lines := names_an_engine(path, engines):
            found[rel] = lines
    assert found == {}, f"modules that name an engine (ask sparkplay.engines.registry): {found}"


def test_the_fitness_walk_finds_a_named_engine(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""vllm in prose."""\nENGINE = "vllm"\n# "sglang" in a comment\n')
    assert names_an_engine(module, {"vllm", "sglang"}) == [2]
