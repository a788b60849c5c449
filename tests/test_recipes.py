"""Recipes: importers, catalog, the semantic diff, asking before overwriting, apply, the lookup plugin.

The recipe website is the one thing here that cannot exist: a local HTTP
server on 127.0.0.1 stands in for it (a test double), serving the real
fixture and every kind of bad answer. Everything else is real: the CLI in a
subprocess, files on disk, ansible-playbook with the lookup plugin.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from sparkplay import importing
from sparkplay.engines import registry
from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline, model
from sparkplay.recipes.diff import semantic_diff
from sparkplay.recipes.importers.webjson import prose_settings
from sparkplay.recipes.store import catalog, fetch
from tests import steps
from tests.conftest import PROJECT, run_cli

FIXTURES = PROJECT / "tests" / "fixtures"
WEB_JSON = FIXTURES / "localairecipes" / "glm-5-3-flash-nvfp4-on-2x-dgx-spark-atlas-rc4-2-tp2-dflash2-1m.json"
TOML = FIXTURES / "launcher" / "glm53-flash-nvfp4" / "recipe.toml"
WEB = json.loads(WEB_JSON.read_text())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty sparkplay project: its catalog and inventories start empty."""
    root = tmp_path / "project"
    (root / "playbooks").mkdir(parents=True)
    (root / "ansible.cfg").write_text("[defaults]\n")
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def cli(project: Path, *args: str, **kw) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, "--project-dir", str(project), **kw)


# --- the local stand-in for the recipe website ----------------------------------------------


def _routes(port: int) -> dict[str, tuple[int, str, bytes]]:
    def js(data: object) -> bytes:
        return json.dumps(data).encode()

    alt = {
        "recipe": {
            "name": "Tiny vLLM",
            "serve_command": "VLLM_USE_V1=1 vllm serve Org/Tiny-Model-FP8 --max-model-len 4096 --port 9000",
            "environment": {"HF_HUB_OFFLINE": "1"},
            "description": "A tiny test recipe.",
        },
        "rating": 5,
    }
    base = f"http://127.0.0.1:{port}"
    return {
        "/ok.json": (200, "application/json", WEB_JSON.read_bytes()),
        "/alt.json": (200, "application/json", js(alt)),
        "/404.json": (404, "text/plain", b"not found"),
        "/500.json": (500, "text/plain", b"boom"),
        "/page.json": (200, "text/html", b"<!doctype html><html><body>Recipe</body></html>"),
        "/array.json": (200, "application/json", js([WEB])),
        "/big.json": (200, "application/json", b'{"pad": "' + b"x" * (2 << 20) + b'"}'),
        "/nocommand.json": (200, "application/json", js({"title": "no command", "notes": "prose only"})),
        "/unbalanced.json": (200, "application/json", js({"title": "t", "command": "vllm serve 'Org/M --port 1"})),
        "/unknown.json": (200, "application/json", js({"title": "t", "command": "sglang launch --model Org/M"})),
        "/meta.json": (
            200,
            "application/json",
            js(
                {
                    "title": "t",
                    "command": "vllm serve Org/M --served-model-name 'x; touch /tmp/sparkplay-pwned' "
                    '--chat-template "$(touch /tmp/sparkplay-pwned)" --tokenizer `touch /tmp/sparkplay-pwned`',
                }
            ),
        ),
        "/r1.json": (302, base + "/ok.json", b""),
        "/loop1.json": (302, base + "/loop2.json", b""),
        "/loop2.json": (302, base + "/loop3.json", b""),
        "/loop3.json": (302, base + "/loop4.json", b""),
        "/loop4.json": (302, base + "/loop5.json", b""),
        "/loop5.json": (302, base + "/ok.json", b""),
        "/downgrade.json": (302, "http://example.invalid/ok.json", b""),
    }


@pytest.fixture(scope="module")
def site():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/slow.json":
                time.sleep(3)
            if self.path == "/trickle.json":  # headers at once, then a byte every 0.2 s for 20 s
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100")
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    for _ in range(100):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.2)
                return
            code, ctype, body = routes.get(self.path, (404, "text/plain", b"no"))
            self.send_response(code)
            if 300 <= code < 400:
                self.send_header("Location", ctype)
            else:
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    routes = _routes(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


# --- the catalog and the public interface ---------------------------------------------------


def test_reimport_reproduces_the_catalog(project):
    """recipes/glm53*.yml are exactly what the importers make of the seeds."""
    assert cli(project, "recipe", "import", str(TOML.relative_to(PROJECT))).returncode == 0
    assert cli(project, "recipe", "import", str(WEB_JSON.relative_to(PROJECT)), "--name", "glm53-atlas").returncode == 0
    for name in ("glm53", "glm53-atlas"):
        made = (project / "recipes" / f"{name}.yml").read_text()
        assert made == (PROJECT / "recipes" / f"{name}.yml").read_text(), name


def show(name: str) -> dict:
    proc = run_cli("recipe", "show", name, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


PUBLIC_KEYS = {
    "schema",
    "name",
    "title",
    "source",
    "engine",
    "model",
    "context_length",
    "topology",
    "serve",
    "speculative",
}


def test_show_atlas_recipe():
    doc = show("glm53-atlas")
    assert doc.keys() >= PUBLIC_KEYS
    assert doc["schema"] == "sparkplay.recipe/v1"
    assert {"kind", "location", "sha256"} <= doc["source"].keys()
    assert doc["engine"]["name"] == "atlas" and doc["engine"]["runtime"] == "docker"
    assert doc["engine"]["image"] == "ghcr.io/enntity/atlas-sparkglm:246a3a948ab9"
    assert doc["context_length"] == 1048576
    assert doc["topology"] == {"nodes": 2, "tensor_parallel": 2, "pipeline_parallel": 1, "expert_parallel": 2}
    assert (doc["serve"]["port"], doc["serve"]["bind"]) == (8893, "127.0.0.1")
    assert doc["speculative"] == {"method": "dflash", "num_tokens": 8, "draft_model": "/models/drafter"}
    assert doc["model"]["repo"] == "nvidia/GLM-5.3-Flash-NVFP4"
    assert doc["model"]["revision"] == "423acf37583782c51c142d145aef733d72943d93"
    filled = {p["key"] for p in doc["provenance"] if p["how"] == "filled"}
    assert {"model.repo", "model.revision", "engine.image"} <= filled
    # every flag of the web recipe's command line, in order, one token each
    assert doc["serve"]["args"] == cmdline.tokenise(WEB["command"])[2:]
    assert doc["serve"]["env"]["ATLAS_RDMA_ALLREDUCE"] == "1"
    assert "DISPLAY_CARVEOUT" not in doc["serve"]["env"]  # conditional in the prose ("only with")
    assert doc["knobs"]["gpu_memory_utilization"] == 0.88


def test_show_vllm_recipe():
    doc = show("glm53")
    assert doc["engine"]["name"] == "vllm"
    assert doc["engine"]["image"] == "glm53-flash-nvfp4:local"
    assert doc["context_length"] == 262144
    assert doc["topology"]["tensor_parallel"] == 2 and doc["topology"]["nodes"] == 2
    assert doc["speculative"] == {"method": "mtp", "num_tokens": 5, "draft_model": None}
    assert doc["model"]["served_name"] == "glm53"
    assert doc["serve"]["env"] == {
        "HF_HUB_OFFLINE": "1",
        "VLLM_MLA_NOPE_PAD_ROPE": "1",
        "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
        "TORCH_CUDA_ARCH_LIST": "12.1a",
        "CUTE_DSL_ARCH": "sm_121a",
        "OMP_NUM_THREADS": "4",
    }
    spec = doc["serve"]["args"][doc["serve"]["args"].index("--speculative-config") + 1]
    assert spec == '{"method":"mtp","num_speculative_tokens":5}'
    assert json.loads(spec)["num_speculative_tokens"] == 5
    assert doc["serve"]["health_timeout_s"] == 3600


def test_catalog_recipes_validate():
    for name in ("glm53", "glm53-atlas"):
        proc = run_cli("recipe", "validate", name)
        assert proc.returncode == 0, proc.stdout
        assert f"recipe {name}: ok" in proc.stdout
    assert "non-commercial" in run_cli("recipe", "validate", "glm53-atlas").stdout


def test_list_shows_both():
    proc = run_cli("recipe", "list")
    assert proc.returncode == 0
    assert "glm53-atlas" in proc.stdout and "vllm" in proc.stdout


# --- fetching -------------------------------------------------------------------------------


def test_import_from_url_records_url_and_hash(project, site):
    proc = cli(project, "recipe", "import", f"{site}/ok.json", "--name", "web")
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load((project / "recipes" / "web.yml").read_text())
    assert doc["source"]["location"] == f"{site}/ok.json"
    assert doc["source"]["sha256"] == __import__("hashlib").sha256(WEB_JSON.read_bytes()).hexdigest()
    assert doc["context_length"] == 1048576


def test_one_redirect_is_followed(project, site):
    assert cli(project, "recipe", "import", f"{site}/r1.json", "--name", "web").returncode == 0


def test_tolerant_field_names_env_object_and_extra_fields(project, site):
    # a vLLM recipe that names no image runs in vLLM's default image for DGX Spark, said; --set names another
    default = cli(project, "recipe", "import", f"{site}/alt.json")
    assert default.returncode == 0, default.stderr
    doc = yaml.safe_load((project / "recipes" / "tiny-vllm.yml").read_text())
    assert doc["engine"]["image"] == registry.spec("vllm").defaults.image
    said = [p["detail"] for p in doc["provenance"] if p["key"] == "engine.image" and p["how"] == "filled"]
    assert said and "the source names no image" in said[0] and "--set engine.image=IMAGE" in said[0]
    image = "engine.image=vllm/vllm-openai:v0.11.0"
    proc = cli(project, "recipe", "import", f"{site}/alt.json", "--yes", "--set", image)
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load((project / "recipes" / "tiny-vllm.yml").read_text())
    assert doc["engine"]["image"] == "vllm/vllm-openai:v0.11.0"
    assert {"key": "engine.image", "how": "set", "detail": f"--set at import of {site}/alt.json"} in doc["provenance"]
    assert doc["engine"]["name"] == "vllm"
    assert doc["model"]["repo"] == "Org/Tiny-Model-FP8" and doc["model"]["quant"] == "fp8"
    assert doc["serve"]["port"] == 9000 and doc["context_length"] == 4096
    assert doc["serve"]["env"] == {"VLLM_USE_V1": "1", "HF_HUB_OFFLINE": "1"}
    assert doc["extra"] == {"rating": 5}
    assert cli(project, "recipe", "validate", "tiny-vllm").returncode == 0


def test_shell_metacharacters_stay_literal(project, site):
    marker = Path("/tmp/sparkplay-pwned")
    marker.unlink(missing_ok=True)
    proc = cli(project, "recipe", "import", f"{site}/meta.json", "--name", "meta", "--set", "engine.image=v/v:1")
    assert proc.returncode == 0, proc.stderr
    args = yaml.safe_load((project / "recipes" / "meta.yml").read_text())["serve"]["args"]
    assert "x; touch /tmp/sparkplay-pwned" in args
    assert "$(touch /tmp/sparkplay-pwned)" in args
    assert "`touch" in args  # backticks are plain characters, split like any word
    assert not marker.exists()


BAD_URLS = {
    "/404.json": "answered HTTP 404",
    "/500.json": "answered HTTP 500",
    "/page.json": "is an HTML page, not a recipe",
    "/array.json": "holds a JSON list, not a recipe object",
    "/big.json": "is larger than 1024 KiB",
    "/nocommand.json": "the recipe JSON has no command line",
    "/unbalanced.json": "cannot be split into arguments (No closing quotation)",
    "/unknown.json": "unknown engine in the recipe's command line ('sglang')",
    "/loop1.json": "redirects more than 3 times",
    "/downgrade.json": "refusing to fetch 'http://example.invalid/ok.json'",
}


@pytest.mark.parametrize(("path", "message"), list(BAD_URLS.items()))
def test_bad_answers_are_one_line_and_change_nothing(project, site, path, message):
    before = snapshot(project)
    proc = cli(project, "recipe", "import", f"{site}{path}", "--name", "bad")
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("sparkplay: error: "), proc.stderr
    assert message in proc.stderr
    assert snapshot(project) == before


def test_slow_server_times_out(project, site):
    before = snapshot(project)
    proc = cli(project, "recipe", "import", f"{site}/slow.json", env={"SPARKPLAY_FETCH_CONNECT_TIMEOUT_S": "1"})
    assert proc.returncode == 1
    assert "did not answer within 1 s" in proc.stderr and proc.stderr.count("\n") == 1
    assert snapshot(project) == before


def test_unreachable_host(project):
    with __import__("socket").socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = cli(project, "recipe", "import", f"http://127.0.0.1:{port}/r.json")
    assert proc.returncode == 1
    assert "cannot reach" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (project / "recipes").exists()


@pytest.mark.parametrize("url", ["http://example.invalid/r.json", "ftp://example.invalid/r.json"])
def test_plain_http_or_other_schemes_are_refused_before_connecting(project, url):
    proc = cli(project, "recipe", "import", url)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


# --- files ----------------------------------------------------------------------------------


def test_toml_syntax_error(project, tmp_path):
    bad = tmp_path / "recipe.toml"
    bad.write_text('engine = "vllm"\nargs = [ "--x" \n')
    proc = cli(project, "recipe", "import", str(bad))
    assert proc.returncode == 2 and "is not valid TOML" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (project / "recipes").exists()


def test_toml_unknown_engine_and_unknown_keys_kept(project, tmp_path):
    bad = tmp_path / "recipe.toml"
    bad.write_text('engine = "sglang"\nmodel = "Org/M"\n')
    proc = cli(project, "recipe", "import", str(bad))
    assert proc.returncode == 2 and "unknown engine 'sglang' in recipe.toml" in proc.stderr
    good = tmp_path / "ok" / "recipe.toml"
    good.parent.mkdir()
    good.write_text('engine = "vllm"\nmodel = "Org/M"\ndocker_image = "i:1"\nrequired_nodes = 1\nlauncher_hint = "x"\n')
    assert cli(project, "recipe", "import", str(good), "--name", "m").returncode == 0
    assert yaml.safe_load((project / "recipes" / "m.yml").read_text())["extra"] == {"launcher_hint": "x"}


def test_toml_bad_speculative_json(project, tmp_path):
    bad = tmp_path / "recipe.toml"
    bad.write_text('engine = "vllm"\nmodel = "Org/M"\nargs = ["--speculative-config", """\n\'{"method": }\'"""]\n')
    proc = cli(project, "recipe", "import", str(bad))
    assert proc.returncode == 2 and "--speculative-config is not valid JSON" in proc.stderr


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", ".hidden", "UPPER", "a..b", ""])
def test_bad_names_are_refused(project, name):
    proc = cli(project, "recipe", "import", str(TOML), "--name", name)
    assert proc.returncode == 2 and "is not allowed" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (project / "recipes").exists()
    assert not (project.parent / "evil.yml").exists() and not (project / "evil.yml").exists()


def test_sparkplay_yaml_round_trip(project):
    proc = cli(project, "recipe", "import", str(PROJECT / "recipes" / "glm53.yml"), "--name", "copy")
    assert proc.returncode == 0, proc.stderr
    copy = yaml.safe_load((project / "recipes" / "copy.yml").read_text())
    original = yaml.safe_load((PROJECT / "recipes" / "glm53.yml").read_text())
    assert copy == {**original, "name": "copy"}


# --- asking before overwriting --------------------------------------------------------------


def _changed_toml(tmp_path: Path) -> Path:
    changed = tmp_path / "changed" / "recipe.toml"
    changed.parent.mkdir()
    text = TOML.read_text().replace('"262144"', '"131072"').replace('"--max-num-seqs", "1"', '"--max-num-seqs", "2"')
    changed.write_text(text.replace('OMP_NUM_THREADS = "4"', 'OMP_NUM_THREADS = "8"\nNEW_KEY = "x"'))
    return changed


def test_overwrite_without_terminal_is_refused_and_changes_nothing(project, tmp_path):
    assert cli(project, "recipe", "import", str(TOML)).returncode == 0
    before = snapshot(project)
    proc = cli(project, "recipe", "import", str(_changed_toml(tmp_path)))
    assert proc.returncode == 3
    assert "context_length: 262144 -> 131072" in proc.stdout
    assert "flag --max-num-seqs: 1 -> 2" in proc.stdout
    assert "env OMP_NUM_THREADS: 4 -> 8" in proc.stdout and "env NEW_KEY: added (x)" in proc.stdout
    assert "no terminal to ask on; rerun with --yes" in proc.stderr and proc.stderr.count("\n") == 1
    assert snapshot(project) == before


def test_overwrite_with_yes_backs_up_and_replaces(project, tmp_path):
    assert cli(project, "recipe", "import", str(TOML)).returncode == 0
    old = (project / "recipes" / "glm53.yml").read_text()
    proc = cli(project, "recipe", "import", str(_changed_toml(tmp_path)), "--yes")
    assert proc.returncode == 0 and "replaced" in proc.stdout
    (backup,) = (project / "recipes" / ".backups").iterdir()
    assert backup.read_text() == old
    assert yaml.safe_load((project / "recipes" / "glm53.yml").read_text())["context_length"] == 131072
    assert cli(project, "recipe", "list").stdout.count("glm53") == 1  # backups are not recipes


def test_name_saves_elsewhere_and_same_content_is_unchanged(project, tmp_path):
    assert cli(project, "recipe", "import", str(TOML)).returncode == 0
    assert cli(project, "recipe", "import", str(_changed_toml(tmp_path)), "--name", "glm53-short").returncode == 0
    assert "unchanged" in cli(project, "recipe", "import", str(TOML)).stdout


def _on_terminal(project: Path, answer: bytes, *args: str) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as its stdin/stdout and type `answer` at the prompt."""
    main, sub = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkplay", *args, "--project-dir", str(project)],
        stdin=sub,
        stdout=sub,
        stderr=sub,
        cwd=PROJECT,
        close_fds=True,
    )
    os.close(sub)
    output = b""
    deadline = time.monotonic() + 60
    answered = False
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        if not answered and b"[y/N]" in output:
            os.write(main, answer)
            answered = True
        if proc.poll() is not None and not ready:
            break
    os.close(main)
    return proc.wait(timeout=30), output.decode(errors="replace")


@pytest.mark.parametrize(("answer", "code"), [(b"\n", 3), (b"n\n", 3), (b"y\n", 0)])
def test_terminal_asks_default_no(project, tmp_path, answer, code):
    assert cli(project, "recipe", "import", str(TOML)).returncode == 0
    old = (project / "recipes" / "glm53.yml").read_text()
    rc, output = _on_terminal(project, answer, "recipe", "import", str(_changed_toml(tmp_path)))
    assert "Replace recipe glm53" in output and "[y/N]" in output
    assert rc == code, output
    replaced = (project / "recipes" / "glm53.yml").read_text() != old
    assert replaced is (code == 0)


# --- the semantic diff, cmdline, prose ------------------------------------------------------


def test_semantic_diff_between_the_two_catalog_recipes():
    proc = run_cli("recipe", "diff", "glm53", "glm53-atlas")
    lines = proc.stdout.splitlines()
    assert "engine.name: vllm -> atlas" in lines
    assert "context_length: 262144 -> 1048576" in lines
    assert "topology.expert_parallel: 1 -> 2" in lines
    assert "speculative.method: mtp -> dflash" in lines
    assert "flag --max-model-len: removed (was 262144)" in lines
    assert "flag --max-seq-len: added (1048576)" in lines
    assert "env HF_HUB_OFFLINE: removed (was 1)" in lines


def test_semantic_diff_of_identical_recipes_is_empty():
    doc = yaml.safe_load((PROJECT / "recipes" / "glm53.yml").read_text())
    assert semantic_diff(doc, doc) == []
    assert semantic_diff(doc, {**doc, "speculative": None}) == [
        "speculative.method: mtp -> (none)",
        "speculative.num_tokens: 5 -> (none)",
    ]


def test_command_engines_and_env_prefix():
    assert cmdline.parse("vllm serve Org/M --port 1").engine == "vllm"
    assert cmdline.parse("/usr/bin/llama-server -m /m.gguf --rpc a:1,b:2").engine == "llamacpp"
    assert cmdline.parse("serve /m --kernel-target=x").engine == "atlas"
    parsed = cmdline.parse("A=1 B='two words' vllm serve Org/M")
    assert parsed.env == {"A": "1", "B": "two words"} and parsed.model == "Org/M"
    with pytest.raises(BadInput):
        cmdline.parse("serve /m --no-kernel-target")


def test_prose_settings_skip_placeholders_and_conditions():
    found, conditional = prose_settings("A_B=1 + C_D=2 when --flag; E_F=<half>, G_H=x. only with I_J=1")
    assert found == {"G_H": "x"}  # E_F's value is a placeholder
    assert conditional == ["A_B", "C_D", "I_J"]


def test_fetch_cap_is_enforced_while_reading(site):
    with pytest.raises(fetch.FetchError, match="larger than 1 KiB"):
        fetch.fetch_json(f"{site}/ok.json", max_bytes=1024)


def test_schema_rejects_unknown_keys_and_bad_engine():
    doc = yaml.safe_load((PROJECT / "recipes" / "glm53.yml").read_text())
    assert model.schema_errors(doc) == []
    assert model.schema_errors({**doc, "surprise": 1})
    assert model.schema_errors({**doc, "engine": {**doc["engine"], "name": "tgi"}})


# --- apply ----------------------------------------------------------------------------------


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    target = tmp_path / "inv"
    shutil.copytree(PROJECT / "inventory" / "sample", target)
    return target


def apply(inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("apply", *args, "-i", str(inventory))


def test_apply_records_the_choice_and_asks_before_replacing(inventory):
    target = inventory / "group_vars" / "all" / "sparkplay.yml"
    dry = apply(inventory, "glm53", "--dry-run")
    assert dry.returncode == 0 and "would create" in dry.stdout and not target.exists()
    assert apply(inventory, "glm53").returncode == 0
    recorded = yaml.safe_load(target.read_text())
    assert recorded["sparkplay_recipe"] == "glm53" and recorded["sparkplay_knobs"] == {}
    assert "unchanged" in apply(inventory, "glm53").stdout
    before = target.read_text()
    refused = apply(inventory, "glm53-atlas", "--set", "gpu_memory_utilization=0.9")
    assert refused.returncode == 3 and "sparkplay_recipe: glm53 -> glm53-atlas" in refused.stdout
    assert target.read_text() == before
    done = apply(inventory, "glm53-atlas", "--set", "gpu_memory_utilization=0.9", "--yes")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(target.read_text())["sparkplay_knobs"] == {"gpu_memory_utilization": 0.9}
    (backup,) = (inventory / ".sparkplay-backups" / "group_vars" / "all").iterdir()
    assert backup.read_text() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["glm53", "--set", "gpu_memory_utilization=1.5"], "greater than the maximum of 1"),
        (["glm53-atlas", "--set", "gpu_memory_utilization=0"], "less than or equal to the minimum of 0"),
        (["glm53", "--set", "nonsense=1"], "is not KNOB=VALUE with a known knob"),
        (["glm53", "--set", "kv_shard=maybe"], "is not of type 'boolean'"),
        (["nope"], "unknown recipe 'nope'"),
    ],
)
def test_apply_bad_input_changes_nothing(inventory, args, message):
    before = snapshot(inventory)
    proc = apply(inventory, *args)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert snapshot(inventory) == before


def test_apply_refuses_an_incomplete_recipe_naming_the_key(inventory, tmp_path):
    """A catalog recipe that lost a field it needs (edited by hand): apply names the key and the file."""
    project = tmp_path / "proj"
    shutil.copytree(
        PROJECT,
        project,
        symlinks=True,
        ignore=shutil.ignore_patterns(".venv", ".git", ".cache", ".ansible", "inventory"),
    )
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"title": "Other", "command": "serve /models/x --kernel-target=other --tp-size=2"}))
    args = ("recipe", "import", str(unknown), "--name", "other", "--project-dir", str(project))
    assert (
        run_cli(*args, "--set", "engine.image=ghcr.io/enntity/atlas-sparkglm:1", "--set", "model.repo=o/x").returncode
        == 0
    )
    saved = project / "recipes" / "other.yml"
    doc = yaml.safe_load(saved.read_text())
    doc["engine"]["image"] = None
    saved.write_text(model.to_yaml(doc))
    proc = run_cli("apply", "other", "-i", str(inventory), "--project-dir", str(project))
    assert proc.returncode == 2
    assert "recipe other cannot be used: engine.image: no container image is known" in proc.stderr
    assert "set engine.image in the recipe in" in proc.stderr
    assert not (inventory / "group_vars" / "all" / "sparkplay.yml").exists()


# --- Ansible reaches the same code ----------------------------------------------------------


# playbooks/recipe.yml is the first step of serve.yml (and of every playbook that takes a
# recipe); run alone it touches no node, so the sample inventory's hosts need not exist.
def playbook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ansible-playbook", "playbooks/recipe.yml", *args],
        capture_output=True,
        text=True,
        cwd=PROJECT,
        check=False,
        timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_INVENTORY": str(PROJECT / "inventory" / "sample")},
    )


def test_serve_playbook_prints_the_recipe_summary():
    proc = playbook("-e", "recipe=glm53-atlas")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "glm53-atlas: atlas serving nvidia/GLM-5.3-Flash-NVFP4 (nvfp4), context 1048576" in proc.stdout


def test_serve_playbook_fails_early_on_an_unknown_recipe():
    proc = playbook("-e", "recipe=nope")
    assert proc.returncode != 0
    assert "unknown recipe 'nope' (known: glm53, glm53-atlas, lab-small, lab-tiny, lab-vllm)" in proc.stdout
    assert "spark-a" not in proc.stdout  # no node was touched


def test_serve_playbook_uses_the_inventorys_recorded_choice(inventory):
    assert apply(inventory, "glm53").returncode == 0
    proc = steps.playbook("playbooks/recipe.yml", inventory=inventory / "hosts.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "glm53: vllm serving LibertAIDAI/GLM-5.3-Flash-NVFP4" in proc.stdout


def test_a_failed_write_leaves_the_old_recipe_whole(project, tmp_path, monkeypatch):
    """Writes go to a temp file, fsync, rename: a crash mid-write never leaves half a file."""
    from sparkplay import fsutil
    from sparkplay.recipes.store import catalog

    cat = project / "recipes"
    assert cli(project, "recipe", "import", str(TOML)).returncode == 0
    old = (cat / "glm53.yml").read_text()
    doc = importing.import_source(str(_changed_toml(tmp_path)))

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsutil.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        catalog.save(cat, doc, lambda *_: True)
    assert (cat / "glm53.yml").read_text() == old
    assert sorted(p.name for p in cat.iterdir() if not p.name.startswith(".backups")) == ["glm53.yml"]


@pytest.mark.parametrize("content", ["schema: sparkplay.recipe/v1\nname: broken\ntitle: x\n", "- a list\n", "a: [\n"])
def test_a_bad_file_in_the_catalog_is_named_and_hides_nothing(project, content):
    (project / "recipes").mkdir()
    (project / "recipes" / "lab-tiny.yml").write_text((PROJECT / "recipes" / "lab-tiny.yml").read_text())
    (project / "recipes" / "broken.yml").write_text(content)
    listed = cli(project, "recipe", "list")
    assert listed.returncode == 2 and "Traceback" not in listed.stderr
    assert "lab-tiny" in listed.stdout and "broken.yml" in listed.stderr
    shown = cli(project, "recipe", "show", "broken")
    assert shown.returncode == 2 and "Traceback" not in shown.stderr and "broken" in shown.stderr


def test_the_total_deadline_holds_against_a_server_that_trickles(site):
    started = time.monotonic()
    with pytest.raises(fetch.FetchError, match="took longer than 2 s"):
        fetch.fetch_json(f"{site}/trickle.json", connect_timeout=5, total_timeout=2)
    assert time.monotonic() - started < 3.5  # 2 s, not the 20 s the server would take


@pytest.mark.parametrize(
    "prose", ["Set HF_HUB_OFFLINE=1 once the weights are cached.", "Once HF_HUB_OFFLINE=1 is set, restart it."]
)
def test_once_makes_a_setting_conditional(prose):
    found, conditional = prose_settings(prose + " Always VLLM_X=2.")
    assert found == {"VLLM_X": "2"} and conditional == ["HF_HUB_OFFLINE"]


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])  # noqa: S104 - recipes that say so, narrowed
def test_a_recipe_that_binds_everywhere_is_imported_on_loopback_and_says_so(project, tmp_path, wildcard):
    changed = tmp_path / "wide" / "recipe.toml"
    changed.parent.mkdir()
    wide = f'"--trust-remote-code", "--host", "{wildcard}",'
    changed.write_text(TOML.read_text().replace('"--trust-remote-code",', wide, 1))
    proc = cli(project, "recipe", "import", str(changed))
    assert proc.returncode == 0, proc.stderr
    assert f"note: serve.bind: the recipe binds {wildcard}; imported as 127.0.0.1" in proc.stderr
    doc = yaml.safe_load((project / "recipes" / "glm53.yml").read_text().split("---\n", 1)[1])
    assert doc["serve"]["bind"] == "127.0.0.1"


def test_the_semantic_diff_covers_every_field_the_deployment_reads():
    from sparkplay.recipes.diff import semantic_diff

    old = catalog.load_for_use(catalog.catalog_dir(PROJECT), "glm53-atlas")
    new = json.loads(json.dumps(old))
    new["title"], new["notes"] = "another title", ["other words"]
    assert semantic_diff(old, new) == []  # words only
    new["serve"]["shm_size"], new["serve"]["health_timeout_s"] = "64g", 1800
    new["serve"]["distributed_backend"] = "ray"
    new["engine"]["image_dir"] = "atlas"
    new["model"]["checkpoints"][1]["revision"] = "f" * 40
    lines = semantic_diff(old, new)
    for field in (
        "serve.shm_size",
        "serve.health_timeout_s",
        "serve.distributed_backend",
        "engine.image_dir",
        "model.checkpoints[1].revision",
    ):
        assert any(line.startswith(f"{field}: ") for line in lines), (field, lines)
