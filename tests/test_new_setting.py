"""A new setting needs one Python list entry and one role default (issue 42): nothing between them is edited.

The test adds `serve_test_flag` the way docs/architecture.md ("How to add: a setting") says, on a copy of the
project: its key and default in `settings.LAUNCH_DEFAULTS` (which `SETTINGS["launch"]` lists) and one line in
the copy's roles/serve/defaults/main.yml. An engine reads it where it builds argv (`ctx.options.settings`);
here a wrapper around the llama.cpp adapter stands for that rule. Then `sparkplay plan --json` (the CLI,
ansible-runner, playbooks/plan.yml, the serve role's plan, the settings and deployment lookups) must show it
in each rank's argv: the role's default, and an inventory's value over it. playbooks/recipe.yml,
roles/serve/tasks/plan.yml and the CLI are the project's own, untouched.

The nodes are this machine under two names (Ansible's local connection), each given its fabric environment
as a variable (`sparkplay_fabric_env_text`, which the serve role's plan reads instead of the node's file):
the plan reads facts only, it changes nothing on a node.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from sparkplay.engines.plan import stand_in_nodes
from tests.conftest import PROJECT, run_cli

# What a developer adds in Python, given to every Python process of the run (the CLI and Ansible's) as it
# starts: the setting's list entry, and the rule that reads it (here: a flag on each rank's command line).
SITECUSTOMIZE = """
from sparkplay import settings
from sparkplay.engines.llamacpp import plan

settings.LAUNCH_DEFAULTS["serve_test_flag"] = ""
settings.SETTINGS["launch"] = tuple(settings.LAUNCH_DEFAULTS)
_adapter = plan.plan


def _with_flag(ctx):
    launch = _adapter(ctx)
    value = ctx.options.settings.get("serve_test_flag")
    for rank in launch["ranks"]:
        rank["argv"] = [*rank["argv"], f"--test-flag={value}"] if value else rank["argv"]
    return launch


plan.plan = _with_flag
"""
ROLE_DEFAULT = '\nserve_test_flag: "from-the-role-default"\n'


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("setting") / "project"
    ignore = shutil.ignore_patterns(".venv", ".git", ".cache", ".ansible", "inventory", "tests", "docs", "benchmarks")
    shutil.copytree(PROJECT, root, symlinks=True, ignore=ignore)
    with (root / "roles" / "serve" / "defaults" / "main.yml").open("a") as defaults:
        defaults.write(ROLE_DEFAULT)  # the one role default
    (root / "python").mkdir()
    (root / "python" / "sitecustomize.py").write_text(SITECUSTOMIZE)  # the one list entry (and its rule)
    return root


def inventory(tmp_path: Path, **group_vars: object) -> Path:
    hosts = {}
    for node in stand_in_nodes(2):
        text = "".join(f"{key}={value}\n" for key, value in node.fabric_env.items())
        hosts[node.host] = {
            "sparkplay_rank": node.rank,
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "sparkplay_fabric_env_text": text,
        }
    folder = tmp_path / "inventory"
    (folder / "group_vars" / "sparkplay_nodes").mkdir(parents=True)
    (folder / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sparkplay_nodes": {"hosts": hosts}}}}))
    (folder / "group_vars" / "sparkplay_nodes" / "main.yml").write_text(yaml.safe_dump(group_vars or {"x": 1}))
    return folder


def plan_argv(project: Path, folder: Path) -> list[list[str]]:
    env = {"PYTHONPATH": str(project / "python")}
    proc = run_cli("plan", "lab-tiny", "-i", str(folder), "--json", "--project-dir", str(project), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launch = json.loads(proc.stdout)["launch"]
    assert launch is not None, "the plan has no launch: the nodes' facts did not reach stage two"
    return [rank["start"] for rank in launch["ranks"]]


def test_a_new_setting_reaches_every_ranks_argv_from_its_role_default_and_the_inventory(project, tmp_path):
    argvs = plan_argv(project, inventory(tmp_path / "a"))
    assert len(argvs) == 2 and all("--test-flag=from-the-role-default" in argv for argv in argvs), argvs
    argvs = plan_argv(project, inventory(tmp_path / "b", serve_test_flag="from-the-inventory"))
    assert all("--test-flag=from-the-inventory" in argv for argv in argvs), argvs


def test_without_its_role_default_a_new_setting_stays_at_its_python_default(project, tmp_path):
    """The role default is what carries it: with the line gone, the setting is Python's default (empty:
    no flag), so the first test's flag came through the role, not around it."""
    bare = tmp_path / "bare"
    shutil.copytree(project, bare, symlinks=True)
    defaults = bare / "roles" / "serve" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text().replace(ROLE_DEFAULT, "\n"))
    argvs = plan_argv(bare, inventory(tmp_path / "c"))
    assert argvs and not any(a.startswith("--test-flag") for argv in argvs for a in argv), argvs
