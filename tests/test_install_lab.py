"""sparkplay installed the way its users install it, run from an empty folder. Marked `lab`.

Real: the wheel built from this tree (`pip wheel`), installed with its
dependencies into a fresh virtualenv outside the checkout (what pipx does),
run with a home folder of its own and no SPARKPLAY_PROJECT_DIR, from a folder
with nothing in it; then the lab brought up (from the provisioned nodes'
snapshot; from bare nodes in tests/test_install_bare_lab.py) and lab-tiny
served by that installed command. Only the lab itself (containers, simulated cable) stands
in for Sparks, as everywhere else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import steps
from tests.conftest import PROJECT, provisioned_snapshot, run_cli

pytestmark = [pytest.mark.lab, pytest.mark.usefixtures("lab_host")]


class Installed:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.cwd = root / "empty"
        self.venv = root / "venv"
        self.data = self.home / ".local" / "share" / "sparkplay"

    def run(self, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """The installed command, from its empty folder, bounded by its step's budget (tests/steps.py)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKPLAY_", "XDG_", "VIRTUAL_ENV"))}
        path = [p for p in env.get("PATH", "").split(os.pathsep) if Path(sys.executable).parent != Path(p)]
        env.update(HOME=str(self.home), PATH=os.pathsep.join([str(self.venv / "bin"), *path]))
        step, budget = steps.cli_step(args)
        argv = [str(self.venv / "bin" / "sparkplay"), *args]
        return steps.run_step(argv, step=f"installed {step}", budget=timeout or budget, cwd=self.cwd, env=env)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    where = Installed(tmp_path_factory.mktemp("installed"))
    where.cwd.mkdir()
    dist, source = where.root / "dist", where.root / "source"
    # built from a copy of what git holds (tracked, and new files it does not ignore): the build writes build/
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=PROJECT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (PROJECT / name).is_file() and not (PROJECT / name).is_symlink():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT / name, source / name)
    wheel_of = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(dist), "-q"]
    build = steps.run_step(wheel_of, step="pip wheel of this tree", budget=600)
    assert build.returncode == 0, build.stdout + build.stderr
    wheel = next(dist.glob("sparkplay-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", str(where.venv)], check=True, timeout=300)
    install = steps.run_step(
        [str(where.venv / "bin" / "pip"), "install", "-q", str(wheel)], step="pip install of the wheel", budget=1200
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    yield where  # the lab stays up, serving: a lab module after this one starts from it or removes it


def test_the_wheel_carries_the_project_and_runs_from_an_empty_folder(installed: Installed) -> None:
    version = installed.run("--version")
    assert version.returncode == 0 and version.stdout.startswith("sparkplay "), version.stderr
    listed = installed.run("recipe", "list")
    assert listed.returncode == 0 and "lab-tiny" in listed.stdout and "glm53-atlas" in listed.stdout, listed.stderr
    # an import lands in the user's catalog, beneath which the shipped one is still read
    source = PROJECT / "tests" / "fixtures" / "lab" / "lab-tiny.toml"
    imported = installed.run("recipe", "import", str(source), "--name", "mine", "--yes")
    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert (installed.data / "recipes" / "mine.yml").is_file()
    assert {"mine", "lab-tiny"} <= set(installed.run("recipe", "list").stdout.split())
    # init writes the default inventory in the user's config folder
    init = installed.run("init", "--node", "spark-a", "--node", "spark-b", "--user", "me")
    assert init.returncode == 0, init.stdout + init.stderr
    hosts = yaml.safe_load((installed.home / ".config" / "sparkplay" / "inventory" / "hosts.yml").read_text())
    assert set(hosts["all"]["children"]["sparkplay_nodes"]["hosts"]) == {"spark-a", "spark-b"}
    assert list(installed.cwd.iterdir()) == []  # nothing lands in the folder it was run from


def brings_up_the_lab_and_serves_lab_tiny(installed: Installed, *lab_up: str) -> None:
    """`lab up LAB_UP...` by the installed command, then `up lab-tiny` on its inventory: served on both ranks."""
    up = installed.run("lab", "up", *lab_up)
    assert up.returncode == 0, up.stdout + up.stderr
    inventory = installed.data / "inventory" / "lab"
    assert f"inventory: {inventory / 'hosts.yml'}" in up.stdout
    served = installed.run("up", "lab-tiny", "-i", str(inventory), "--yes")
    assert served.returncode == 0, served.stdout[-4000:] + served.stderr
    assert "lab-tiny answers at http://127.0.0.1:9931" in served.stdout
    rows = json.loads(installed.run("status", "-i", str(inventory), "--json").stdout)
    assert [r["up"] for r in rows] == [True, True]
    assert (installed.home / ".cache" / "sparkplay" / "lab" / "lab-tiny.gguf").is_file()


def test_the_installed_command_brings_up_the_lab_and_serves_lab_tiny(installed: Installed) -> None:
    """From the provisioned nodes' snapshot (tests/conftest.py; made here when missing) by the installed
    command's own `lab up --snapshot`: its `up` runs every role the wheel carries. From bare nodes, so that
    each role changes everything it writes: tests/test_install_bare_lab.py (make test-stack, for CI's time)."""
    run_cli("lab", "down")  # a lab another module left (the containers' names are the lab's, whoever made them)
    name, made = provisioned_snapshot()
    if made:
        run_cli("lab", "down")
    brings_up_the_lab_and_serves_lab_tiny(installed, "--snapshot", name)


def test_the_collection_serves_the_same_lab_by_fqcn(installed: Installed) -> None:
    """An Ansible user's way: the collection tarball built from this tree, installed into a collections
    path of its own, its serve playbook run by FQCN (with the wheel's Python, which its plugins import)."""
    tarballs = installed.root / "collection"
    galaxy = str(installed.venv / "bin" / "ansible-galaxy")
    built = steps.run_step(
        [galaxy, "collection", "build", "--output-path", str(tarballs), str(PROJECT)],
        step="ansible-galaxy collection build",
        budget=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = next(tarballs.glob("sparkplay-spark-*.tar.gz"))
    assert tarball.name == f"sparkplay-spark-{installed.run('--version').stdout.split()[1]}.tar.gz"  # one version
    collections = installed.root / "collections"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKPLAY_", "ANSIBLE_"))}
    env.update(HOME=str(installed.home), ANSIBLE_NOCOLOR="1")
    # from the empty folder: this checkout's ansible.cfg would find the checkout itself as the collection
    subprocess.run(
        [galaxy, "collection", "install", "--no-deps", "-p", str(collections), str(tarball)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=installed.cwd,
        env=env,
    )
    assert (collections / "ansible_collections" / "sparkplay" / "spark" / "playbooks" / "serve.yml").is_file()
    env["ANSIBLE_COLLECTIONS_PATH"] = str(collections)
    inventory = installed.data / "inventory" / "lab" / "hosts.yml"
    proc = steps.run_step(
        [
            str(installed.venv / "bin" / "ansible-playbook"),
            "-i",
            str(inventory),
            "sparkplay.spark.serve",
            "-e",
            "recipe=lab-tiny",
        ],
        step="the installed collection's sparkplay.spark.serve",
        budget=steps.PLAYBOOK_BUDGETS["serve.yml"],
        cwd=installed.cwd,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    assert "lab-tiny answers at http://127.0.0.1:9931" in proc.stdout
    assert "TASK [sparkplay.spark.serve : Serve | " in proc.stdout  # the collection's role, not a checkout's
