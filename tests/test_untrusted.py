"""An untrusted recipe beside trusted ones (issue 38): each finding of the attacker's review, reproduced.

Each test tries what the review (or our own attacks in its spirit) did against the code before, and shows
it refused or confined now, with nothing outside sparkplay's folders changed. Pure or local: plans on
stand-in nodes, modules run by Ansible on localhost, files in tmp_path, real sockets of this machine. What
needs the lab (two engines on one node) is in tests/test_serve_lab.py.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sparkplay import deployment, doctor, imageref, served
from sparkplay.engines import names
from sparkplay.engines.context import environment
from sparkplay.errors import BadInput
from sparkplay.managed import reset_removable
from sparkplay.recipes import model
from sparkplay.recipes.store import fetch, registry
from tests.conftest import PROJECT
from tests.test_boundary import imported, plan, recipe, refused


def _gguf_reader():
    """The module the nodes run, loaded by path: importing it through `ansible_collections` here would set
    that package up before the collection loader the role-rendering tests install."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "sparkplay_gguf_under_test", PROJECT / "plugins" / "module_utils" / "sparkplay_gguf.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- a name with a trailing newline (Python's `$` matches before a final "\n") ------------------------------


@pytest.mark.parametrize("name", ["lab-tiny\n", "lab-tiny\n\n", "x\nDescription=evil"])
def test_a_recipe_name_with_a_newline_is_refused(name):
    with pytest.raises(BadInput):
        model.check_name(name)
    doc = recipe("lab-tiny")
    doc["name"] = name
    assert any("name" in p for p in model.schema_errors(doc))
    with pytest.raises(ValueError, match="is not a recipe name"):
        names.for_slot(name)


def test_an_image_or_a_shared_memory_size_with_a_trailing_newline_is_refused():
    assert not imageref.is_reference("vllm/vllm-openai:v1\n") and imageref.is_reference("vllm/vllm-openai:v1")
    doc = recipe("glm53")
    doc["serve"]["shm_size"] = "32g\n"
    with pytest.raises(BadInput, match="is not a size"):
        plan(doc)


def test_an_env_name_with_a_trailing_newline_is_refused_by_the_schema_and_the_env_file():
    doc = recipe("lab-tiny")
    doc["serve"]["env"] = {"GGML_X\n": "1"}
    assert model.schema_errors(doc)
    with pytest.raises(BadInput, match="is not valid"):
        environment({"GGML_X\n": "1"})


# -- every run sent serve.env's secrets to each node's system log -------------------------------------------

LOGGED = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from ansible.module_utils import basic
    from ansible.module_utils.common.text.converters import to_bytes
    logged = []
    basic.AnsibleModule.log = lambda self, msg, log_args=None: logged.append(msg)
    basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": json.loads(sys.argv[2])}))
    basic._ANSIBLE_PROFILE = "legacy"
    from ansible_collections.sparkplay.spark.plugins.modules import sparkplay_files
    try:
        sparkplay_files.main()
    except SystemExit:
        pass
    sys.stderr.write("\\nLOGGED:" + json.dumps(logged))
    """
)


@pytest.mark.parametrize("check", [False, True])
def test_the_files_module_never_sends_a_files_content_to_the_system_log(tmp_path, check):
    """AnsibleModule logs each call's arguments to syslog/journald; the env file holds the API key."""
    key = "sk-" + "k3y" * 10
    args = {
        "files": [
            {
                "path": str(tmp_path / "serve.env"),
                "content": f"VLLM_API_KEY={key}\n",
                "mode": "0600",
                "owner": str(os.getuid()),
                "group": str(os.getgid()),
                "secret": True,
            }
        ],
        "managed": False,
        "_ansible_check_mode": check,
    }
    done = subprocess.run(
        [sys.executable, "-c", LOGGED, str(PROJECT / "collections"), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    logged = json.loads(done.stderr.rsplit("LOGGED:", 1)[1])
    assert logged and "Invoked with" in logged[0] and "bytes, sha256" in logged[0]
    assert key not in done.stderr + done.stdout
    assert (tmp_path / "serve.env").exists() is (not check)


# -- the diagnostics bundle keeps no secret -----------------------------------------------------------------

NGC = "nvapi-" + "Q7x_" * 16


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"NGC key is {NGC} (from the login)", NGC),
        ("pulling https://alice:hunter2secret@registry.example.com/v2/x", "hunter2secret"),
        ("git clone https://oauth2:glpat-abcdefghijklmnop@gitlab.example.com/x.git", "glpat-abcdefghijklmnop"),
        (
            "non-default args: {'model': '/m', 'api_key': ['k-one-secret-1', 'k-two-secret-2'], 'port': 8000}",
            "k-two-secret-2",
        ),
        ("non-default args: {'model': '/m', 'api_key': ['k-one-secret-1'], 'port': 8000}", "k-one-secret-1"),
        ('"Authorization": "Basic YWxpY2U6aHVudGVyMg=="', "YWxpY2U6aHVudGVyMg=="),
        ("aws AKIAABCDEFGHIJKLMNOP configured", "AKIAABCDEFGHIJKLMNOP"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz in the env", "github_pat_11ABCDEFG0123456789_abc"),
        ("--hf-token=hf_abcdefghijklmnopqrstuvwxyz", "hf_abcdefghijklmnopqrstuvwxyz"),
    ],
)
def test_the_bundle_redacts_realistic_secrets_an_engine_or_a_user_leaves_in_its_output(text, secret):
    cleaned = doctor.redact({"journal": text, "argv": [text]})
    assert secret not in json.dumps(cleaned), cleaned
    assert doctor.REDACTED in cleaned["journal"]


def test_the_bundle_keeps_what_is_no_secret():
    for line in (
        "https://registry.example.com:5000/v2/x",
        "model: nvidia/GLM-5.3 tokens=128",
        "Listening on http://127.0.0.1:8000",
        "basic usage of the API",
    ):
        assert doctor.redact({"journal": line})["journal"] == line


# -- reset with the model root equal to the state folder ----------------------------------------------------


def test_reset_keeps_the_checkpoints_when_the_state_folder_is_the_model_root():
    entries = [
        {"path": "/data/models/org--model"},
        {"path": "/data/models/atlas-overlay"},
        {"path": "/data/models/.sparkplay"},
    ]
    # the state folder listed is the model root itself: everything in it is a checkpoint, kept
    assert reset_removable(entries, ["/data/models"]) == []
    assert reset_removable(entries, ["/data/models/"]) == []
    # the default layout is unchanged: the model root inside the state folder is kept, the rest goes
    state = [{"path": "/var/lib/sparkplay/models"}, {"path": "/var/lib/sparkplay/engine"}]
    assert reset_removable(state, ["/var/lib/sparkplay/models"]) == [{"path": "/var/lib/sparkplay/engine"}]


# -- stop and reset take unit names from the slot, never from a record --------------------------------------


def _record(**fields) -> str:
    return json.dumps(
        {
            "recipe": "lab-tiny",
            "role": "leader",
            "unit": "sparkplay-serve.service",
            "rank": 0,
            "served_name": "m",
            "api_url": "http://127.0.0.1:9931",
            **fields,
        }
    )


def test_a_record_naming_another_unit_is_read_as_its_slots_units():
    hostile = _record(
        unit="ssh.service",
        watch_unit="sshd.service",
        watchdog_unit="cron.service",
        container="postgres",
        env_file="/etc/shadow",
        tool="/bin/sh -c",
    )
    [primary] = served.records({"n": {"/etc/sparkplay/serve.json": hostile}})
    assert primary["unit"] == "sparkplay-serve.service"
    assert primary["watch_unit"] == "sparkplay-serve-watch.service"
    assert primary["watchdog_unit"] == "sparkplay-serve-watchdog.service"
    assert primary["container"] == "sparkplay-serve" and primary["env_file"] == "/etc/sparkplay/serve.env"
    assert primary["tool"] is None  # not a plain path: the role's default tool runs
    [added] = served.records({"n": {"/etc/sparkplay/serve.d/coder.json": _record(slot="coder", unit="ssh")}})
    assert added["unit"] == "sparkplay-serve@coder.service" and added["slot"] == "coder"
    assert added["env_file"] == "/etc/sparkplay/serve.d/coder.env" and added["watch_unit"] is None
    with pytest.raises(BadInput, match="says it is deployment 'other'"):
        served.records({"n": {"/etc/sparkplay/serve.d/coder.json": _record(slot="other")}})
    with pytest.raises(BadInput, match="no deployment record's name"):
        served.records({"n": {"/etc/sparkplay/serve.d/Bad Name.json": _record()}})


def test_the_stop_and_reset_roles_act_only_on_names_from_the_records_rule():
    """The roles read records through sparkplay_records (the rule above) and nothing else names a unit."""
    for role in ("stop", "reset", "status"):
        text = (PROJECT / "roles" / role / "tasks" / "main.yml").read_text()
        assert "from_json).unit" not in text and "| from_json if status_record_raw" not in text
    status = (PROJECT / "roles" / "status" / "tasks" / "main.yml").read_text()
    assert "sparkplay.spark.sparkplay_records | first" in status


# -- apply's registry lookup under recipe import's fetch policy ---------------------------------------------


@pytest.mark.parametrize(
    "realm",
    [
        "http://169.254.169.254/latest/meta-data/",
        "https://127.0.0.1:5000/token",
        "https://10.0.0.7/token",
        "https://[::1]/token",
        "file:///etc/passwd",
        "https://localhost/token",
    ],
)
def test_a_public_registrys_token_realm_may_not_point_inward(realm):
    origin = "https://registry-1.docker.io/v2/org/engine/manifests/latest"
    with pytest.raises(registry.RegistryError, match="the registry lookup stopped"):
        registry._token(f'Bearer realm="{realm}",service="x"', "org/engine", origin)


@pytest.mark.parametrize(
    "image", ["127.0.0.1:5000/org/engine:latest", "localhost:5000/x/y", "10.0.0.7:443/a/b", "[::1]:5000/a/b:latest"]
)
def test_a_recipes_image_on_a_registry_inward_is_never_asked_unless_the_inventory_names_it(image, monkeypatch):
    """`apply` contacted whatever registry the recipe's image named, this machine's services included."""
    asked = []
    monkeypatch.setattr(registry, "_request", lambda *a, **k: asked.append(a) or (200, {}, b""))
    with pytest.raises(registry.RegistryError, match="which the inventory does not name"):
        registry.resolve(image)
    with pytest.raises(registry.RegistryError, match="which the inventory does not name"):
        registry.resolve(image, ["*", "127.0.0.1:6000/org/*", "other/*"])  # the catch-all names no registry
    assert asked == []
    host = registry.split(image)[0]
    with pytest.raises(registry.RegistryError, match="no sha256 digest"):  # named: asked (here, no digest)
        registry.resolve(image, [f"{host}/{registry.split(image)[1]}"])
    assert len(asked) == 1


def test_a_registry_the_user_named_inward_may_not_send_the_token_request_elsewhere_inward():
    origin = "http://127.0.0.1:5000/v2/org/engine/manifests/latest"
    for realm in ("http://127.0.0.1:5001/token", "http://localhost:2375/token", "https://10.0.0.7/token"):
        with pytest.raises(registry.RegistryError, match="the registry lookup stopped"):
            registry._token(f'Bearer realm="{realm}",service="x"', "org/engine", origin)


def test_the_registry_lookups_redirects_follow_the_same_rule():
    origin = "https://registry.example.com/v2/x/manifests/latest"
    for inward in ("https://127.0.0.1/x", "http://registry.example.com/x", "https://192.168.1.1/x"):
        with pytest.raises(BadInput):
            fetch.check_hop(origin, inward)
    fetch.check_hop(origin, "https://cdn.example.org/blob")  # outward https is a registry's normal redirect


# -- the GGUF header reader bounds its time -----------------------------------------------------------------


def _gguf(path: Path, entries: list[bytes], count: int) -> Path:
    with path.open("wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 0, count) + b"".join(entries))
    return path


def _key(name: str, kind: int) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", kind)


def test_a_header_of_tens_of_millions_of_empty_strings_is_refused_within_about_a_second(tmp_path):
    """2^26 empty strings fit in the 1 GiB bound (512 MiB of zero lengths, a sparse file here): the reader
    before looped over them in Python for minutes."""
    path = _gguf(tmp_path / "h.gguf", [_key("tokenizer.ggml.tokens", 9) + struct.pack("<IQ", 8, 1 << 26)], 1)
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size + (1 << 26) * 8)
    sparkplay_gguf = _gguf_reader()
    started = time.monotonic()
    with pytest.raises(sparkplay_gguf.GGUFError, match="takes more than 1 s"):
        sparkplay_gguf.header_fields(str(path), ("block_count",))
    assert time.monotonic() - started < 3


def test_a_real_sized_vocabulary_is_read_well_within_the_bound(tmp_path):
    tokens = b"".join(struct.pack("<Q", len(t)) + t for t in (f"tok{i}".encode() for i in range(256_000)))
    entries = [
        _key("general.architecture", 8) + struct.pack("<Q", 5) + b"llama",
        _key("tokenizer.ggml.tokens", 9) + struct.pack("<IQ", 8, 256_000) + tokens,
        _key("tokenizer.ggml.scores", 9) + struct.pack("<IQ", 6, 256_000) + b"\0" * 4 * 256_000,
        _key("llama.block_count", 4) + struct.pack("<I", 32),
    ]
    path = _gguf(tmp_path / "real.gguf", entries, 4)
    sparkplay_gguf = _gguf_reader()
    started = time.monotonic()
    assert sparkplay_gguf.header_fields(str(path), ("block_count",)) == {
        "general.architecture": "llama",
        "llama.block_count": 32,
    }
    assert time.monotonic() - started < sparkplay_gguf.MAX_SECONDS / 2


def test_a_string_array_that_claims_more_than_the_file_holds_ends_early(tmp_path):
    path = _gguf(tmp_path / "short.gguf", [_key("t", 9) + struct.pack("<IQ", 8, 10) + struct.pack("<Q", 1 << 20)], 1)
    sparkplay_gguf = _gguf_reader()
    with pytest.raises(sparkplay_gguf.GGUFError, match="ends early"):
        sparkplay_gguf.header_fields(str(path), ("block_count",))


# -- the mirror's run-time folder and whom it signals -------------------------------------------------------


def test_the_mirrors_run_folder_is_tightened_and_a_strangers_is_refused(tmp_path):
    from sparkplay.nodetools.ckpt import sync
    from sparkplay.nodetools.ckpt.common import Failure

    loose = tmp_path / "run"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    sync.own_folder(loose)
    assert oct(loose.stat().st_mode & 0o777) == "0o700"
    link = tmp_path / "link"
    link.symlink_to(loose)
    with pytest.raises(Failure, match="not a folder of this user's"):
        sync.own_folder(link)


def test_the_mirror_signals_only_its_own_sync_never_a_process_with_a_sync_argument(tmp_path):
    from sparkplay.nodetools.ckpt import sync

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "sync"])
    try:
        time.sleep(0.2)
        assert not sync._is_sync(other.pid)
        assert not sync._is_sync(True) and not sync._is_sync(-1) and not sync._is_sync("1")
        status = tmp_path / "status.json"
        status.write_text(json.dumps({"pid": other.pid}))
        assert sync.stop(status) == {"stopped": False}
        assert other.poll() is None  # still running: nothing was signalled
    finally:
        other.kill()


# -- probe (and so status) took a squatter on the API port for the engine, and sent it the key ----------------


def test_the_probe_names_a_squatter_on_the_api_port_and_never_sends_it_the_key(tmp_path, capsys):
    import argparse
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from sparkplay.engines.systemd import env_file
    from sparkplay.nodetools.serve import common as serve_common
    from sparkplay.nodetools.serve import ready as serve_ready

    seen: list[str] = []

    class Squatter(BaseHTTPRequestHandler):  # a local user's fake API, bound before the engine
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(f"{self.path} {self.headers.get('Authorization')}")
            body = json.dumps({"data": [{"id": "m"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Squatter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "serve.env").write_text(env_file({"VLLM_API_KEY": "sk-the-real-key-0123456789"}, "native"))
    args = argparse.Namespace(
        url=f"http://127.0.0.1:{server.server_address[1]}",
        model="m",
        unit="sparkplay-serve.service",
        container=None,
        api_key_env="VLLM_API_KEY",
        env_file=str(tmp_path / "serve.env"),
        env_format="native",
    )
    try:
        assert serve_ready.cmd_probe(args) == 0
    finally:
        server.shutdown()
        serve_common.API_KEY.clear()
    look = json.loads(capsys.readouterr().out)
    assert look["answers"] is False and look["health"] is False
    assert f"is held by PID {os.getpid()}" in look["why"] and "not by sparkplay-serve.service" in look["why"]
    assert seen == []  # never asked, so never sent the key


# -- environment names that load code, move code caches, or twin a confined flag -----------------------------

REVIEW_NAMES = [
    "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN",
    "VLLM_LOGGING_CONFIG_PATH",
    "HOME",
    "XDG_CACHE_HOME",
    "VLLM_CACHE_ROOT",
    "HF_MODULES_CACHE",
]
OUR_NAMES = [
    "NCCL_CONF_FILE",
    "NCCL_ENV_PLUGIN",
    "GGML_BACKEND_PATH",
    "TORCH_HOME",
    "CUDA_CACHE_PATH",
    "VLLM_ALLOW_INSECURE_SERIALIZATION",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
    "SOME_VENDOR_PLUGIN",
    "TRANSFORMERS_CACHE",
    "VLLM_RPC_BASE_PATH",
]


@pytest.mark.parametrize("name", REVIEW_NAMES + OUR_NAMES)
@pytest.mark.parametrize("name_of_recipe", ["lab-tiny", "glm53"])  # native and docker
def test_a_name_that_loads_code_or_moves_a_code_cache_is_a_request_in_every_runtime(name, name_of_recipe):
    doc = recipe(name_of_recipe)
    doc["serve"]["env"][name] = f"{ROOT_OF_MODELS}/evil--payload/x"
    refused(doc, f"serve.env.{name}", f"'env:{name}'")
    assert f"env:{name}" in plan(doc, allow=frozenset({f"env:{name}"}))["privileged"]


ROOT_OF_MODELS = "/var/lib/sparkplay/models"


@pytest.mark.parametrize(
    "name",
    [
        "LLAMA_ARG_RPC",
        "LLAMA_ARG_HOST",
        "LLAMA_ARG_PORT",
        "LLAMA_ARG_MODEL",
        "LLAMA_ARG_LORA",
        "LLAMA_ARG_CTX_SIZE",
        "LLAMA_ARG_API_KEY",
        "LLAMA_ARG_LOG_FILE",
        "LLAMA_ARG_MMPROJ",
        "LLAMA_ARG_SLOT_SAVE_PATH",
        "VLLM_DP_MASTER_IP",
    ],
)
def test_the_env_twin_of_a_flag_sparkplay_owns_or_confines_is_refused_like_the_flag(tmp_path, name):
    """--rpc is refused in a recipe's flags; LLAMA_ARG_RPC pointed a native llama.cpp at any RPC server, which
    then got the model's layers and every prompt's activations."""
    for which in ("lab-tiny", "glm53"):
        doc = recipe(which)
        doc["serve"]["env"][name] = "10.9.9.9:50052"
        with pytest.raises(BadInput, match=f"serve.env.{name} is .*twin") as caught:
            plan(doc, allow=frozenset({f"env:{name}"}))  # no allow lets it through
        assert "give the flag in serve.args" in str(caught.value)
    doc = recipe("lab-tiny")
    doc["serve"]["env"][name] = "x"
    with pytest.raises(BadInput, match="twin"):
        imported(tmp_path, doc)  # refused at import too


def test_the_native_environment_is_an_allow_list_of_plain_names():
    doc = recipe("lab-tiny")
    doc["serve"]["env"] |= {
        "OMP_NUM_THREADS": "4",
        "GGML_CUDA_NO_PINNED": "1",
        "LLAMA_ARG_THREADS": "8",
        "PYTHONUNBUFFERED": "1",
        "NCCL_DEBUG": "INFO",
    }
    assert plan(doc)["privileged"] == []
    for name in ("ACME_TUNING", "GGML_SOMETHING_NEW", "MALLOC_ARENA_MAX", "ODD_PLACE_DIR"):
        unknown = recipe("lab-tiny")
        unknown["serve"]["env"][name] = "1"
        refused(unknown, f"serve.env.{name}", f"'env:{name}'")


@pytest.mark.parametrize(
    "name",
    [
        "ACME_TUNING",
        "MALLOC_ARENA_MAX",
        "CUDA_INJECTION64_PATH",  # CUDA loads the library it names into the process
        "TRITON_HOME",  # triton's compiled kernels (code it loads again) under it
        "OMP_TOOL_LIBRARIES",  # OpenMP loads each library it lists (OMPT)
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",  # inductor loads compiled graphs from a server
        "TORCHINDUCTOR_REDIS_HOST",
        "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
        "SGLANG_SOMETHING_NEW",
        "ATLAS_PROFILE_DIR",  # Atlas's own prefix, but a place
    ],
)
@pytest.mark.parametrize("which", ["glm53", "glm53-atlas", "lab-tiny"])
def test_the_environment_allow_list_is_one_rule_for_containers_and_the_host(which, name):
    """A container was only a block list: loader names the list missed passed with no allow."""
    doc = recipe(which)
    doc["serve"]["env"][name] = "1"
    refused(doc, f"serve.env.{name}", f"'env:{name}'")
    assert plan(doc, allow=frozenset({f"env:{name}"}))["privileged"] == [f"env:{name}"]


def test_an_engines_documented_tuning_needs_no_allow_in_its_container():
    docker = recipe("glm53")
    docker["serve"]["env"] |= {"VLLM_USE_FLASHINFER_SAMPLER": "1", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4"}
    assert plan(docker)["privileged"] == []
    atlas = recipe("glm53-atlas")
    atlas["serve"]["env"] |= {"ATLAS_GLM_NEW_TUNING": "1"}  # the profile's, cleared from the ambient env
    assert plan(atlas)["privileged"] == []


def test_the_seed_recipes_import_and_plan_with_no_allow():
    for name in ("lab-tiny", "lab-small", "lab-vllm", "glm53", "glm53-atlas"):
        assert plan(recipe(name))["privileged"] == [], name


# -- flags that make an engine import Python ----------------------------------------------------------------


def test_a_plugin_file_is_a_request_scoped_to_the_recipe(tmp_path):
    doc = recipe("glm53")
    doc["serve"]["args"] += ["--tool-parser-plugin", "/root/.cache/vllm/evil.py"]
    refused(
        doc,
        "serve.args --tool-parser-plugin",
        "imports the Python file /root/.cache/vllm/evil.py",
        "'code:glm53/--tool-parser-plugin'",
    )
    assert plan(doc, allow=frozenset({"code:glm53/--tool-parser-plugin"}))["privileged"] == [
        "code:glm53/--tool-parser-plugin"
    ]
    other = {**doc, "name": "other"}
    refused(other, "'code:other/--tool-parser-plugin'", allow=frozenset({"code:glm53/--tool-parser-plugin"}))


@pytest.mark.parametrize(
    ("flag", "value", "shown"),
    [
        ("--trust-remote-code", None, "runs the Python the checkpoint ships"),
        ("--worker-extension-cls", "evil.Ext", "imports the Python class evil.Ext"),
        ("--logits-processors", "evil:Proc", "imports the Python logits processor(s) evil:Proc"),
        ("--middleware", "evil.mw", "imports the Python middleware evil.mw"),
        ("--logits-processor-pattern", ".*", "lets API callers load Python logits processors"),
        ("--allowed-local-media-path", "/", "lets API callers read files under /"),
    ],
)
def test_flags_that_import_code_are_shown_at_import_as_what_they_are(flag, value, shown):
    doc = recipe("glm53")
    doc["serve"]["args"] += [flag] + ([value] if value else [])
    said = [f"{p.key}: {p.message}" for p in model.problems(doc) if p.severity == "warning"]
    assert any(f"serve.args {flag}: {shown}" in line for line in said), said
    assert plan(doc)["privileged"] == []  # code from the pinned checkpoint or the image: shown, not refused


# -- engines in containers: no capability but their own, no privilege to gain, their own caches -------------


def _docker_options(doc: dict, **options) -> list[str]:
    return plan(doc, **options)["ranks"][0]["container_options"]


def _caps(options: list[str]) -> tuple[list[str], list[str]]:
    added = [options[i + 1] for i, o in enumerate(options) if o == "--cap-add"]
    dropped = [options[i + 1] for i, o in enumerate(options) if o == "--cap-drop"]
    return dropped, added


@pytest.mark.parametrize("name", ["glm53", "glm53-atlas"])
def test_every_engine_container_drops_every_capability_but_its_documented_ones(name):
    """Docker's defaults gave every engine CAP_NET_RAW on the host's network: a packet socket read another
    model's bearer key and prompt on the gateway-to-engine hop."""
    options = _docker_options(recipe(name))
    dropped, added = _caps(options)
    assert dropped == ["ALL"] and "NET_RAW" not in added and "SYS_ADMIN" not in added
    assert set(added) <= {"IPC_LOCK", "SYS_NICE"}
    assert options[options.index("--security-opt") + 1] == "no-new-privileges=true"


def test_a_one_node_vllm_keeps_its_ipc_namespace_and_a_cluster_shares_the_hosts():
    one = recipe("glm53")
    one["topology"].update(nodes=1, tensor_parallel=1)
    assert "--ipc" not in _docker_options(one) and "--shm-size" in _docker_options(one)
    assert _docker_options(recipe("glm53"))[_docker_options(recipe("glm53")).index("--ipc") + 1] == "host"


def test_each_deployment_compiles_into_a_cache_of_its_own():
    """Every vLLM deployment mounted one read-write compile cache, whose generated code the next one loaded."""

    def cache(slot: str | None) -> str:
        (mount,) = [
            m for m in plan(recipe("glm53"), slot=slot)["ranks"][0]["mounts"] if m["target"] == "/root/.cache/vllm"
        ]
        return mount["source"]

    primary, coder, chat = cache(None), cache("coder"), cache("chat")
    assert len({primary, coder, chat}) == 3 and primary == "/var/lib/sparkplay/cache/vllm"
    assert coder.startswith("/var/lib/sparkplay/cache/") and not coder.startswith(primary + "/")


def test_each_added_native_deployment_runs_as_a_user_of_its_own_with_a_home_of_its_own():
    primary, added = plan(recipe("lab-small")), plan(recipe("lab-small"), slot="lab-small")
    assert primary["user"] == "sparkplay-engine" and primary["home"] == "/var/lib/sparkplay/engine"
    assert added["user"] == names.engine_user("lab-small") and added["user"].startswith("sparkplay-e-")
    assert len(added["user"]) <= 32 and added["home"] == "/var/lib/sparkplay/engine@lab-small"
    assert (
        f"User={added['user']}" in added["sandbox"]
        and "ReadWritePaths=/var/lib/sparkplay/engine@lab-small" in (added["sandbox"])
    )
    assert names.engine_user("a" * 64) != names.engine_user("a" * 63)


# -- an engine image is code ----------------------------------------------------------------------------------

DIGEST = "sha256:" + "5e" * 32


def _with_image(image: str) -> dict:
    doc = recipe("glm53")
    doc["engine"].update(image=image, image_dir=None)
    return doc


@pytest.mark.parametrize(
    "image",
    [
        "vllm/vllm-openai:v0.12.0",
        "docker.io/vllm/vllm-openai:latest",
        "nvcr.io/nvidia/vllm:25.11-py3",
        f"lmsysorg/sglang@{DIGEST}",
        "scitrera/dgx-spark-vllm:0.16.0-t5",
        "vllm-node",
        "glm53-flash-nvfp4:local",
    ],
)
def test_the_engines_official_images_and_local_builds_are_trusted(image):
    assert plan(_with_image(image))["privileged"] == []


@pytest.mark.parametrize(
    "image",
    [
        "evil/vllm-openai:latest",
        "ghcr.io/someone/vllm:1",
        "nvcr.io.evil.com/nvidia/vllm:1",
        "docker.io/vllmx/vllm-openai:1",
        "quay.io/vllm/vllm-openai:1",
        "localhost:5000/vllm/vllm-openai:1",
    ],
)
def test_an_image_from_elsewhere_must_be_pinned_and_allowed_by_its_digest(image):
    doc = _with_image(image)
    refused(
        doc,
        "engine.image",
        "not among the images the inventory trusts",
        "not pinned by digest",
        "sparkplay apply",
        allow=frozenset({"image:" + image.rsplit(":", 1)[0]}),
    )
    pinned = _with_image(f"{image.rsplit(':', 1)[0]}@{DIGEST}")
    repo = imageref.repository(pinned["engine"]["image"])
    refused(pinned, "engine.image", f"'image:{repo}@{DIGEST}'")
    assert plan(pinned, allow=frozenset({f"image:{repo}@{DIGEST}"}))["privileged"] == [f"image:{repo}@{DIGEST}"]
    other = _with_image(f"{image.rsplit(':', 1)[0]}@sha256:{'00' * 32}")  # another build under the same name
    refused(other, "engine.image", allow=frozenset({f"image:{repo}@{DIGEST}"}))
    assert any(p.key == "engine.image" and "privileged request" in p.message for p in model.problems(doc))


def test_the_trusted_list_is_the_inventorys_and_reaches_the_plan():
    """serve_trusted_images: an ORG/* entry, an exact repository, '*' for every image; others refused."""
    from tests.test_deployment import facts_of

    doc = _with_image("ghcr.io/myorg/vllm:2")
    stage_one = deployment.compute(doc, {"rank0": 0, "rank1": 1}, {})
    with pytest.raises(BadInput, match="not among the images the inventory trusts"):
        deployment.with_launch(stage_one, doc, facts_of(2), {})
    for trusted in (["ghcr.io/myorg/*"], ["ghcr.io/myorg/vllm"], ["*"]):
        launch = deployment.with_launch(stage_one, doc, facts_of(2), {"serve_trusted_images": trusted})["launch"]
        assert launch["privileged"] == []
    for bad in ("ghcr.io/myorg/vllm:2", f"x/y@{DIGEST}", "UPPER/Case", ""):
        with pytest.raises(BadInput, match="serve_trusted_images names"):
            deployment.with_launch(stage_one, doc, facts_of(2), {"serve_trusted_images": [bad]})


# what a process tries, run in another process (a transient unit, a container), to reach past its sandbox:
# each attempt "allowed" or the name of the error; a probe adds its own attempts to `said` and prints it
ESCAPE_ATTEMPTS = """
import json, os, socket, sys
def attempt(what):
    try:
        what()
        return "allowed"
    except OSError as exc:
        return type(exc).__name__
said = {
    "packet_socket": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))),
    "raw_ip_socket": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)),
}
"""
# a real container under the plan's own options, on the host's network as an engine runs (the GPU and RDMA
# devices and the unlimited memory lock left out: CI has neither, and may raise no rlimit): a chown and a
# mknod besides the sockets
CONTAINED_PROBE = (
    ESCAPE_ATTEMPTS
    + """
said["chown"] = attempt(lambda: os.chown("/srv", 1000, 1000))
said["mknod"] = attempt(lambda: os.mknod("/tmp/null2", 0o600 | 0o020000, os.makedev(1, 3)))
print(json.dumps(said))
"""
)


def _container_options_without_devices(options: list[str]) -> list[str]:
    kept, skip = [], False
    for option in options:
        if skip:
            skip = False
        elif option in ("--gpus", "--device", "--ulimit"):
            skip = True
        else:
            kept.append(option)
    return kept


@pytest.mark.usefixtures("lab_host")
@pytest.mark.lab
def test_an_engine_container_on_the_host_network_can_open_no_packet_socket():
    """Docker's defaults (the plan before) let a container on the host's network open a packet socket and read
    other models' loopback traffic; the plan's options (cap-drop ALL, IPC_LOCK back) leave it none."""
    from sparkplay.lab import image

    tag, _ = image.ensure_image(image.ImageRecipe())
    options = _container_options_without_devices(_docker_options(recipe("glm53")))
    assert "--network" in options and options[options.index("--network") + 1] == "host"

    def probe(opts: list[str]) -> dict:
        done = subprocess.run(
            ["docker", "run", "--rm", *opts, "--entrypoint", "/usr/bin/python3", tag, "-c", CONTAINED_PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    defaults = probe(["--network", "host"])
    assert defaults["packet_socket"] == "allowed"  # what the review used: the test can fail
    confined = probe(options)
    assert confined == {
        "packet_socket": "PermissionError",
        "raw_ip_socket": "PermissionError",
        "chown": "PermissionError",
        "mknod": "PermissionError",
    }, confined
