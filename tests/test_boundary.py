"""The recipe boundary: what a recipe may ask of a host (sparkplay.boundary), tried as an attacker would.

Each attack is a recipe written to look ordinary; each is refused with one
line naming the field and the fix, confined, or held as a privileged
request that runs only when the inventory allows it by name. Pure: plans on
stand-in nodes, imports from files in tmp_path.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from sparkplay import boundary, importing
from sparkplay import deployment as deployment_mod
from sparkplay.engines.names import ENGINE_USER
from sparkplay.engines.plan import Options, build, stand_in_nodes
from sparkplay.errors import BadInput
from sparkplay.managed import reset_removable, reset_state_dirs
from sparkplay.recipes import model
from sparkplay.recipes.store import catalog
from tests.conftest import PROJECT

ROOT = "/var/lib/sparkplay/models"


def recipe(name: str) -> dict:
    return copy.deepcopy(catalog.load_for_use(catalog.catalog_dir(PROJECT), name))


def plan(doc: dict, allow: frozenset[str] | None = frozenset(), **options) -> dict:
    count = int(doc["topology"]["nodes"] or 2)
    return build(doc, stand_in_nodes(count), Options(model_root=ROOT, allow=allow, **options))


def refused(doc: dict, *words: str, **options) -> str:
    with pytest.raises(BadInput) as caught:
        plan(doc, **options)
    text = str(caught.value)
    assert "\n" not in text
    for word in words:
        assert word in text, text
    return text


def imported(tmp_path, doc: dict) -> dict:
    path = tmp_path / "r.yml"
    path.write_text(model.to_yaml(doc))
    return importing.import_source(str(path))


# -- the seeds ask nothing privileged -------------------------------------------------------------


@pytest.mark.parametrize("name", ["lab-tiny", "glm53", "glm53-atlas"])
def test_the_seed_recipes_make_no_privileged_request_and_plan_with_nothing_allowed(name):
    doc = recipe(name)
    assert boundary.requests(doc) == []
    assert plan(doc)["privileged"] == []


# -- knobs that reach the host ------------------------------------------------------------------


def test_a_recipe_that_binds_etc_as_its_prefix_cache_is_refused_and_even_allowed_etc_stays_out(tmp_path):
    doc = recipe("glm53-atlas")
    doc["knobs"].update(prefix_cache_dir="/etc", prefix_cache_gb=32)
    refused(doc, "knobs.prefix_cache_dir", "serve_allow", "'prefix_cache_dir'")
    refused(doc, "system or sparkplay folder", allow=frozenset({"prefix_cache_dir"}))
    # the import shows it as a request (the rehearsal refuses /etc itself)
    with pytest.raises(BadInput, match="system or sparkplay folder"):
        imported(tmp_path, doc)


@pytest.mark.parametrize(
    "folder",
    [
        "/",
        "/tmp",
        "/tmp/",
        "/var/tmp",
        "/etc/cron.d",
        "/usr/lib",
        "/root/.ssh",
        "/home",
        "/var/lib/sparkplay",
        "/var/lib/sparkplay/models/x",
        "/var/lib",
        "/run/user/0",
        "/boot",
        "/proc/self",
        "/nvme/../etc",
        "rel/dir",
        "/var/./lib",
    ],
)
def test_no_system_or_sparkplay_folder_is_a_prefix_cache_even_from_the_inventory(folder):
    doc = recipe("glm53-atlas")
    with pytest.raises(BadInput):
        plan(doc, knobs={"prefix_cache_dir": folder, "prefix_cache_gb": 32})


def test_a_prefix_cache_the_inventory_names_needs_no_allow_and_one_the_recipe_names_does():
    doc = recipe("glm53-atlas")
    mine = plan(doc, knobs={"prefix_cache_dir": "/nvme/cache/", "prefix_cache_gb": 32})
    assert {"source": "/nvme/cache", "target": "/prefix-cache", "readonly": False} in mine["ranks"][0]["mounts"]
    assert mine["privileged"] == []
    doc["knobs"].update(prefix_cache_dir="/nvme/cache", prefix_cache_gb=32)
    refused(doc, "bind-mounts the host folder /nvme/cache")
    assert plan(doc, allow=frozenset({"prefix_cache_dir"}))["privileged"] == ["prefix_cache_dir"]
    # the inventory setting it back to null takes the recipe's request away
    assert plan(doc, knobs={"prefix_cache_dir": None})["privileged"] == []


def test_the_display_carveout_capability_is_the_inventorys_to_give():
    doc = recipe("glm53-atlas")
    doc["knobs"]["display_carveout"] = True
    refused(doc, "SYS_ADMIN", "'display_carveout'")
    allowed = plan(doc, allow=frozenset({"display_carveout"}))
    assert "SYS_ADMIN" in allowed["ranks"][0]["container_options"]
    assert "SYS_ADMIN" in plan(recipe("glm53-atlas"), knobs={"display_carveout": True})["ranks"][0]["exec"]


# -- what a native engine runs on the host ------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONWARNINGS",
        "PYTHONHOME",
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "BASH_ENV",
        "PATH",
        "NODE_OPTIONS",
        "PERL5OPT",
        "TRITON_PTXAS_PATH",
        "SSL_CERT_FILE",
        "OPENSSL_CONF",
        "JAVA_TOOL_OPTIONS",
    ],
)
def test_an_env_name_that_changes_what_code_loads_is_a_request(name):
    doc = recipe("lab-tiny")
    doc["serve"]["env"][name] = f"{ROOT}/evil--payload/libx.so"
    refused(doc, f"serve.env.{name}", f"'env:{name}'")
    assert plan(doc, allow=frozenset({f"env:{name}"}))["privileged"] == [f"env:{name}"]


@pytest.mark.parametrize("name", ["PYTHONUNBUFFERED", "PYTHONHASHSEED", "OMP_NUM_THREADS", "GGML_RPC_DEBUG"])
def test_plain_tuning_variables_are_not_requests(name):
    doc = recipe("lab-tiny")
    doc["serve"]["env"][name] = "1"
    assert plan(doc)["ranks"][0]["env"][name] == "1"


def test_the_ld_preload_from_a_mirrored_extra_checkpoint_attack_is_refused_and_shown_at_import(tmp_path, capsys):
    doc = recipe("lab-tiny")
    doc["model"]["checkpoints"] = [{"role": "extra", "repo": "helpful/kernels", "revision": "a" * 40}]
    doc["serve"]["env"]["LD_PRELOAD"] = f"{ROOT}/helpful--kernels/libfast.so"
    doc["name"] = "tiny-fast"
    saved = imported(tmp_path, doc)  # importable: the inventory may allow it
    warnings = [str(p) for p in model.problems(saved) if "privileged" in p.message]
    assert warnings == [
        "warning: serve.env.LD_PRELOAD: privileged request: sets a variable that changes what code the engine "
        "loads; it runs only where the inventory allows it (serve_allow: ['env:LD_PRELOAD'])"
    ]
    refused(saved, "LD_PRELOAD")


def test_packages_the_engine_does_not_need_are_requests():
    doc = recipe("lab-tiny")
    doc["engine"]["packages"] = [*doc["engine"]["packages"], "libggml0-backend-vulkan", "netcat-openbsd"]
    refused(doc, "netcat-openbsd", "'package:netcat-openbsd'")
    assert plan(doc, allow=frozenset({"package:netcat-openbsd"}))["packages"][-1] == "netcat-openbsd"


@pytest.mark.parametrize(
    "flags",
    [
        ["--log-file", "/etc/cron.d/sparkplay"],
        ["--log-file=/etc/cron.d/x"],
        ["--slot-save-path", "../../etc"],
        ["--lora", f"{ROOT}/../../../root/.ssh/id_ed25519"],
        ["--chat-template-file", "~/.bashrc"],
        ["--mmproj", "/home/user/mmproj.gguf"],
    ],
)
def test_a_native_engine_flag_naming_a_host_path_outside_sparkplays_folders_is_refused(flags):
    doc = recipe("lab-tiny")
    doc["serve"]["args"] += flags
    refused(doc, flags[0].split("=")[0])
    with pytest.raises(BadInput):  # at import too: the rehearsal plans the recipe
        plan(doc, allow=None)


def test_a_native_engine_flag_inside_the_model_root_is_kept():
    doc = recipe("lab-tiny")
    doc["serve"]["args"] += ["--mmproj", f"{ROOT}/lab-tiny/mmproj.gguf"]
    assert f"{ROOT}/lab-tiny/mmproj.gguf" in plan(doc)["ranks"][0]["argv"]


def test_a_native_engine_runs_as_its_own_user_in_a_sandbox():
    deployment = plan(recipe("lab-tiny"))
    assert deployment["user"] == ENGINE_USER
    lines = deployment["sandbox"]
    for line in (
        f"User={ENGINE_USER}",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "ProtectHome=yes",
        "CapabilityBoundingSet=",
        "ReadWritePaths=/var/lib/sparkplay/engine",
    ):
        assert line in lines
    docker = plan(recipe("glm53"))
    assert docker["user"] is None and docker["sandbox"] == []
    # a model root under /home stays readable to it
    home = build(recipe("lab-tiny"), stand_in_nodes(2), Options(model_root="/home/me/models"))
    assert "ProtectHome=read-only" in home["sandbox"]


# -- names that could only be an attack -----------------------------------------------------------


@pytest.mark.parametrize(
    "repo",
    [
        "org/..",
        "../etc",
        "org/../../etc",
        "org/name/../x",
        "org--x/y",
        "/etc/x",
        "org/",
        "a/b/c",
        "org/.hidden.",
        "o rg/x",
        "org/x\n",
    ],
)
def test_a_checkpoint_id_that_is_no_hub_id_is_refused(tmp_path, repo):
    doc = recipe("glm53")
    doc["model"]["checkpoints"][0]["repo"] = repo
    refused(doc, "model.checkpoints[0].repo")
    with pytest.raises(BadInput, match="repo"):
        imported(tmp_path, doc)


def test_an_image_folder_or_shared_memory_size_that_is_more_than_it_says_is_refused():
    doc = recipe("glm53")
    doc["engine"]["image_dir"] = "../../etc"
    refused(doc, "engine.image_dir")
    doc = recipe("glm53")
    doc["serve"]["shm_size"] = "32g --privileged"
    refused(doc, "serve.shm_size")


def test_a_container_never_sees_a_host_path_outside_sparkplays_folders():
    with pytest.raises(BadInput, match="outside sparkplay's folders"):
        boundary.confine_mounts([{"source": "/etc", "target": "/x"}], [ROOT], 0)
    with pytest.raises(BadInput):
        boundary.confine_mounts([{"source": f"{ROOT}/../../../etc", "target": "/x"}], [ROOT], 0)
    boundary.confine_mounts([{"source": f"{ROOT}/a", "target": "/x"}], [ROOT], 0)


# -- the API address ----------------------------------------------------------------------------


def test_atlas_owns_host_and_port_whatever_the_recipe_says():
    doc = recipe("glm53-atlas")
    doc["serve"]["args"] += ["--host", "0.0.0.0", "--port=8893"]  # noqa: S104 - the attack under test
    deployment = plan(doc)
    for rank in deployment["ranks"]:
        argv = rank["argv"]
        assert "0.0.0.0" not in argv and "--port=8893" not in argv  # noqa: S104
        assert argv[-4:] == ["--host", "127.0.0.1", "--port", str(8893 + rank["rank"])]
        assert rank["listen"] == [{"address": "127.0.0.1", "port": 8893 + rank["rank"]}]


def test_an_api_beyond_loopback_is_the_inventorys_choice():
    doc = recipe("lab-tiny")
    doc["serve"]["bind"] = "192.0.2.7"
    refused(doc, "serve.bind", "'bind'")
    assert plan(doc, bind="10.0.0.5")["api"]["bind"] == "10.0.0.5"
    assert plan(doc, allow=frozenset({"bind"}))["api"]["bind"] == "192.0.2.7"


# -- a recipe cannot grant itself anything --------------------------------------------------------


def test_a_recipe_cannot_allow_its_own_requests(tmp_path):
    doc = recipe("lab-tiny")
    doc["serve"]["env"]["LD_PRELOAD"] = "/x.so"
    doc["extra"] = {"serve_allow": ["env:LD_PRELOAD"], "sparkplay_knobs": {"x": 1}}
    doc["name"] = "grants-itself"
    saved = imported(tmp_path, doc)
    refused(saved, "LD_PRELOAD")
    # nor through its knobs: the schema knows no such knob
    doc["knobs"] = {"serve_allow": ["env:LD_PRELOAD"]}
    assert model.schema_errors(doc)


@pytest.mark.parametrize(
    "entry",
    [
        "everything",
        "*",
        "env:1BAD",
        "env:A-B",
        "package:",
        "prefix_cache",
        "mod:",
        "mod:../x",
        "mod:x@short",
        "pre_exec:",
        "pre_exec:XYZ",
        "pre_exec:0123456789abc",
    ],
)
def test_an_allow_list_entry_that_is_no_request_is_refused(entry):
    with pytest.raises(BadInput, match="serve_allow"):
        boundary.check_allow([entry])


def test_pinned_allow_entries_are_requests():
    sha = "0123456789abcdef" * 4
    entries = [f"mod:qwen3/fix-parser@{sha}", f"pre_exec:qwen3@{sha}", f"preamble:my.recipe@{sha}"]
    assert boundary.check_allow(entries) == frozenset(entries)


@pytest.mark.parametrize(
    "entry", ["mod:fix-parser", "mod:fix-parser@0123456789ab", "pre_exec:0123456789ab", "preamble:0123456789ab"]
)
def test_short_or_unscoped_allow_entries_are_refused_with_the_form_that_replaces_them(entry):
    """48 bits of a hash, or a mod's name alone, admitted any recipe whose code matched (issue 38)."""
    with pytest.raises(BadInput, match="short hash or a name alone") as caught:
        boundary.check_allow([entry])
    assert "RECIPE" in str(caught.value) and "SHA256" in str(caught.value)


def test_the_allow_list_the_inventory_gives_reaches_the_plan_and_the_unit_through_ansible():
    from tests.role_render import render, role_vars, task, template

    doc = recipe("lab-tiny")
    doc["serve"]["env"]["LD_PRELOAD"] = "/x.so"
    hosts = [n.host for n in stand_in_nodes(2)]
    facts = {n.host: {"serve_node_facts": {"fabric_env": dict(n.fabric_env)}} for n in stand_in_nodes(2)}
    compute = task("roles/serve/tasks/plan.yml", "Serve | Plan every rank (on the leader, with its settings)")
    expr = compute["ansible.builtin.set_fact"]["serve_deployment"]
    stage_one = deployment_mod.compute(doc, {h: r for r, h in enumerate(hosts)}, {"sparkplay_model_root": ROOT})

    def serve_plan(serve_allow: list[str]) -> dict:
        variables = role_vars(
            "serve",
            sparkplay_recipe_plan=doc,
            ansible_play_hosts_all=hosts,
            hostvars=facts,
            sparkplay_deployment=stage_one,
            serve_allow=serve_allow,
        )
        return render(expr, variables)["launch"]

    with pytest.raises(Exception, match="LD_PRELOAD"):
        serve_plan([])
    deployment = serve_plan(["env:LD_PRELOAD"])
    assert deployment["privileged"] == ["env:LD_PRELOAD"]
    # the serve role's unit carries the sandbox the plan computed
    variables = role_vars(
        "serve",
        serve_plan=deployment,
        serve_rank=deployment["ranks"][0],
        ansible_managed="x",
        sparkplay_deployment=stage_one,
        serve_claim=None,
    )
    unit = template("roles/serve/templates/sparkplay-serve.service.j2", variables)
    service = unit.split("[Service]", 1)[1]
    for line in deployment["sandbox"]:
        assert f"\n{line}\n" in service
    assert f"\nUser={ENGINE_USER}\n" in service
    assert "sparkplay-peer-firewall" not in unit  # the leader listens for no peer
    variables["serve_rank"] = deployment["ranks"][1]  # the worker's RPC port is guarded, before it starts
    worker = template("roles/serve/templates/sparkplay-serve.service.j2", variables)
    assert "\nWants=sparkplay-peer-firewall.service\nAfter=sparkplay-peer-firewall.service\n" in worker


# -- reset keeps the checkpoints, however the root is written -------------------------------------


@pytest.mark.parametrize(
    "root",
    [
        "/var/lib/sparkplay/models",
        "/var/lib/sparkplay/models/",
        "/var/lib/sparkplay//models",
        "/var/lib/sparkplay/models/.",
        "/var/lib/sparkplay/x/../models",
    ],
)
def test_reset_never_removes_the_model_root_or_a_folder_holding_it(root):
    entries = [
        {"path": "/var/lib/sparkplay/models"},
        {"path": "/var/lib/sparkplay/engine"},
        {"path": "/var/lib/sparkplay/watchdog.json"},
    ]
    kept = [e["path"] for e in reset_removable(entries, [root])]
    assert kept == ["/var/lib/sparkplay/engine", "/var/lib/sparkplay/watchdog.json"]
    deep = [{"path": "/var/lib/sparkplay/data"}, {"path": "/var/lib/sparkplay/cache"}]
    assert [e["path"] for e in reset_removable(deep, ["/var/lib/sparkplay/data/models/"])] == [
        "/var/lib/sparkplay/cache"
    ]


def test_reset_empties_the_state_folder_the_serve_role_used_and_never_a_system_folder():
    """serve_state_dir moved the state folder: reset reads where from each rank's serve record (before the
    record itself goes) and empties that one too; a record naming a system folder is not followed."""
    from tests.role_render import render, role_vars, task

    assert reset_state_dirs(
        ["/srv/sparkplay/", None, "relative", "/", "/etc/x", "/var/lib", "/var/lib/sparkplay/."], "/var/lib/sparkplay"
    ) == ["/var/lib/sparkplay", "/srv/sparkplay"]
    note = task(
        "roles/reset/tasks/main.yml", "Reset | Note the cable addresses, the state folders and the added deployments"
    )
    path = "/var/lib/sparkplay/serve.json"
    for doc, want in (
        ({"state_dir": "/srv/sparkplay"}, ["/var/lib/sparkplay", "/srv/sparkplay"]),
        (None, ["/var/lib/sparkplay"]),
    ):
        given = {
            "reset_read": {"documents": {path: doc}},
            "sparkplay_serve_record": path,
            "reset_state_dir": "/var/lib/sparkplay",
        }
        assert render(note["ansible.builtin.set_fact"]["reset_state_dirs"], role_vars(**given)) == want


def test_the_sample_inventory_documents_serve_allow():
    text = (PROJECT / "inventory/sample/group_vars/sparkplay_nodes/main.yml").read_text()
    assert "# serve_allow: []" in text
    assert yaml.safe_load((PROJECT / "roles/serve/defaults/main.yml").read_text())["serve_allow"] == []


# -- a recipe URL cannot aim sparkplay at this machine or a private network -----------------------


@pytest.mark.parametrize(
    "target",
    [
        "https://127.0.0.1/r.json",
        "https://localhost/r.json",
        "https://10.0.0.8/r.json",
        "https://192.168.1.1/r.json",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/r.json",
        "https://[::ffff:127.0.0.1]/r.json",
        "http://127.0.0.1:9931/v1/models",
        "https://0.0.0.0/r.json",
    ],
)
def test_a_public_recipe_url_may_not_redirect_inward_or_to_another_scheme(target):
    import urllib.request

    from sparkplay.recipes.store import fetch

    handler = fetch._Redirects("https://recipes.example/r.json")
    request = urllib.request.Request("https://recipes.example/r.json")
    with pytest.raises(BadInput) as caught:
        handler.redirect_request(request, None, 302, "Found", {}, target)
    assert "redirects to" in str(caught.value) and "\n" not in str(caught.value)


def test_a_url_the_user_names_on_loopback_may_redirect_on_loopback():
    import urllib.request

    from sparkplay.recipes.store import fetch

    handler = fetch._Redirects("http://127.0.0.1:8000/a.json")
    request = urllib.request.Request("http://127.0.0.1:8000/a.json")
    assert handler.redirect_request(request, None, 302, "Found", {}, "http://127.0.0.1:8000/b.json") is not None
    with pytest.raises(BadInput, match="another scheme"):
        handler.redirect_request(request, None, 302, "Found", {}, "https://127.0.0.1:8000/b.json")


# the engine's 0600 environment is kept out of every diff: tests/test_node_modules.py


def test_playbooks_check_the_boundary_when_the_recipe_loads_and_doctor_does_not():
    from tests.role_render import plays, render

    [play] = plays("playbooks/recipe.yml", "localhost")
    load = next(t for t in play["tasks"] if t["name"] == "Recipe | Load the recipe")
    expr = load["ansible.builtin.set_fact"]["sparkplay_recipe_doc"]

    def loaded(**extra: object) -> dict:
        node = {"serve_allow": ["no-such-request"]}
        return render(expr, {"sparkplay_recipe_name": "lab-tiny", "sparkplay_leader_node": node, **extra})

    with pytest.raises(Exception, match="serve_allow names 'no-such-request'"):
        loaded()  # the inventory's serve_allow reached the boundary
    assert loaded(sparkplay_recipe_boundary=False)["name"] == "lab-tiny"
    doctor = yaml.safe_load((PROJECT / "playbooks/doctor.yml").read_text())
    assert next(p for p in doctor if p["name"] == "Doctor | Recipe")["vars"]["sparkplay_recipe_boundary"] is False


# -- the bench's own install ----------------------------------------------------------------------


def test_the_bench_installs_llama_benchy_by_hash_as_the_unprivileged_user():
    import re

    lock = (PROJECT / "roles" / "bench" / "files" / "llama-benchy.lock").read_text()
    blocks = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)((?: \\\n\s+--hash=sha256:[0-9a-f]{64})+)", lock, re.M)
    pinned = {name.lower() for name, _, _ in blocks}
    assert "llama-benchy" in pinned and {"transformers", "tokenizers", "numpy", "aiohttp"} <= pinned
    assert len(blocks) == len(re.findall(r"^[A-Za-z0-9_.-]+==", lock, re.M))  # every requirement has hashes
    assert "--index-url" not in lock and "--find-links" not in lock and "file://" not in lock
    steps = yaml.safe_load((PROJECT / "roles" / "bench" / "tasks" / "main.yml").read_text())
    tasks = {t["name"]: t for b in steps for t in b.get("block", [b])}
    install = tasks["Bench | Install llama-benchy with every hash checked, as the bench user"]
    argv = install["ansible.builtin.command"]["argv"]
    assert argv[:4] == ["runuser", "-u", "{{ bench_user }}", "--"] and "--require-hashes" in argv
    run = tasks["Bench | Run the invariance check and llama-benchy, as the bench user"]
    assert "'--as-user', bench_user," in run["ansible.builtin.command"]["argv"]
    # a user of its own (issue 54): the bench holds a deployment's key, which the primary's engine, running as
    # sparkplay-engine, could read from a process of its own user
    from sparkplay.engines import names
    from tests.role_render import render, role_vars

    assert render("{{ bench_user }}", role_vars("bench")) == names.BENCH_USER == "sparkplay-bench"
    assert names.BENCH_USER not in (names.ENGINE_USER, names.engine_user("lab-small"), names.engine_user(None))
    reset = yaml.safe_load((PROJECT / "roles" / "reset" / "tasks" / "main.yml").read_text())
    assert any(t.get("ansible.builtin.user", {}).get("name") == "{{ reset_constants.bench_user }}" for t in reset)


def _bench_and_status_argv(record: dict) -> tuple[list[str], list[str]]:
    from tests.role_render import render, role_vars, task

    run = task("roles/bench/tasks/main.yml", "Bench | Run the invariance check and llama-benchy")
    variables = role_vars(
        "bench",
        **{**run["vars"], "bench_user": "sparkplay-engine", "bench_home": "/h"},
        bench_served=record,
        sparkplay_deployment={"paths": {"tools": {"serve": "/d"}}},
        bench_model_tokenizer={},
    )
    bench = render(run["ansible.builtin.command"]["argv"], variables)
    look = task("roles/status/tasks/main.yml", "Status | Ask the leader's API for health and its models")
    status = render(look["ansible.builtin.command"]["argv"], role_vars("status", status_record=record))
    return bench, status


def test_status_and_bench_reach_an_api_with_a_key_through_the_env_file_never_the_command_line():
    """The serve record names the key's variable and env file; bench and status hand the serve tool those,
    and it reads the key as root on the node (tests/test_serve_tool.py), so no key passes through Ansible."""
    record = {
        "api_url": "http://127.0.0.1:8000",
        "served_name": "m",
        "runtime": "native",
        "tool": "/t",
        "api_key_env": "VLLM_API_KEY",
        "env_file": "/etc/sparkplay/serve.env",
        "unit": "sparkplay-serve.service",
    }
    bench, status = _bench_and_status_argv(record)
    for argv in (bench, status):
        assert argv[0] == "/t"
        at = argv.index("--api-key-env")
        assert argv[at : at + 6] == [
            "--api-key-env",
            "VLLM_API_KEY",
            "--env-file",
            "/etc/sparkplay/serve.env",
            "--env-format",
            "native",
        ]
    assert bench[1:6] == ["bench", "--as-user", "sparkplay-engine", "--home", "/h"]
    # no key: no key arguments; a record older than the `tool` field finds the serve tool where it lands
    del record["api_key_env"], record["tool"]
    bench, status = _bench_and_status_argv(record)
    assert "--api-key-env" not in bench + status
    assert status[:2] == ["/usr/local/lib/sparkplay/sparkplay-serve", "probe"] and bench[0] == "/d"


def test_bench_runs_the_serve_tool_the_serve_role_installed():
    """serve_tool moves the tool; the record says where it went, and the bench runs that one."""
    record = {
        "api_url": "http://127.0.0.1:8000",
        "served_name": "m",
        "runtime": "native",
        "tool": "/opt/x/serve",
        "unit": "sparkplay-serve.service",
    }
    bench, status = _bench_and_status_argv(record)
    assert bench[0] == status[0] == "/opt/x/serve"


# -- an API key never sits on a command line -----------------------------------------------------


@pytest.mark.parametrize(("name", "variable"), [("lab-tiny", "LLAMA_API_KEY"), ("glm53", "VLLM_API_KEY")])
def test_an_api_key_flag_travels_in_the_0600_env_file_not_the_unit(name, variable):
    doc = recipe(name)
    doc["serve"]["args"] += ["--api-key", "sk-local-secret-1234"]
    deployment = plan(doc)
    leader = deployment["ranks"][0]
    assert "sk-local-secret-1234" not in json.dumps([r["argv"] for r in deployment["ranks"]])
    assert "sk-local-secret-1234" not in json.dumps([r["exec"] for r in deployment["ranks"]])
    assert leader["env"][variable] == "sk-local-secret-1234" and deployment["api"]["key_env"] == variable
    doc = recipe("glm53-atlas")
    doc["serve"]["args"] += ["--api-key=sk-local-secret-1234"]
    refused(doc, "--api-key", "world-readable")
    doc = recipe("glm53-atlas")
    doc["serve"]["args"] += ["--auth-token", "sk-local-secret-1234"]  # Atlas's own name for it
    refused(doc, "--auth-token", "world-readable")


def test_the_ray_head_runs_without_the_dashboards_job_api():
    from sparkplay.engines.vllm import plan as vllm

    doc = recipe("glm53")
    doc["serve"]["distributed_backend"] = "ray"
    doc["serve"]["args"] = [a.replace("mp", "ray") if a in ("mp",) else a for a in doc["serve"]["args"]]
    deployment = plan(doc)
    head = deployment["ranks"][0]["argv"]
    assert head[0] == "-c" and "--include-dashboard=false" in head[1] and head[1] == vllm.RAY_HEAD


@pytest.mark.parametrize("package", ["--allow-unauthenticated", "llama.cpp; rm -rf /", "Foo", "a", "pkg=1.0", "x\n"])
def test_a_package_that_is_no_debian_package_name_is_refused(package):
    doc = recipe("lab-tiny")
    doc["engine"]["packages"] = [*doc["engine"]["packages"], package]
    refused(doc, "engine.packages", "not a Debian package name")


# -- the engines' inter-rank ports answer the cable only ------------------------------------------


def test_each_ranks_inter_rank_ports_are_guarded_to_the_cable_addresses():
    from sparkplay.engines import firewall

    vllm = plan(recipe("glm53"))
    leader, worker = vllm["ranks"]
    assert leader["peer_ports"] == [29501] and worker["peer_ports"] == [] and worker["firewall"] == ""
    rules = leader["firewall"]
    assert "tcp dport { 29501 } ip saddr { 192.0.2.10, 192.0.2.11, 198.51.100.10, 198.51.100.11 } accept" in rules
    assert rules.index('iif "lo" accept') < rules.index("accept\n    tcp dport { 29501 } drop")
    assert rules.splitlines()[1:3] == ["table inet sparkplay", "delete table inet sparkplay"]  # loads again
    assert vllm["firewall"] == {"unit": firewall.UNIT, "file": firewall.FILE, "table": "sparkplay", "nft": firewall.NFT}
    atlas = plan(recipe("glm53-atlas"))
    assert [r["peer_ports"] for r in atlas["ranks"]] == [[29510], []]
    tiny = plan(recipe("lab-tiny"))
    assert [r["peer_ports"] for r in tiny["ranks"]] == [[], [50052]]
    with pytest.raises(BadInput, match="not an address"):
        firewall.cable_addresses([{"SPARKPLAY_FABRIC_ADDRESSES": "192.0.2.1,} drop; {"}])


def test_a_hand_written_hf_token_flag_travels_in_the_0600_env_file_and_others_are_refused():
    doc = recipe("glm53")
    doc["serve"]["args"] += ["--hf-token", "hf_local_secret_1234"]
    deployment = plan(doc)
    assert "hf_local_secret_1234" not in json.dumps([[r["argv"], r["exec"]] for r in deployment["ranks"]])
    assert all(r["env"]["HF_TOKEN"] == "hf_local_secret_1234" for r in deployment["ranks"])  # noqa: S105
    doc = recipe("glm53")
    doc["serve"]["args"] += ["--some-secret", "v"]
    refused(doc, "--some-secret", "world-readable")
