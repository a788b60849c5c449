"""The installed command from bare lab nodes: `lab up`, then `up lab-tiny`, so that every role the wheel carries
changes everything it writes (a file missing from the wheel that only a change reads shows here); then an Ansible
user's way on that lab, the collection's serve playbook by FQCN. Marked `lab` and `stack` (make test-stack, for
CI's time: issue 52; tests/test_install_lab.py, in make test, builds and runs the wheel without a lab). Real as
there: the wheel built from this tree, installed into a fresh virtualenv.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from tests import steps
from tests.conftest import PROJECT, run_cli
from tests.test_install_lab import Installed, installed

pytestmark = [pytest.mark.lab, pytest.mark.stack, pytest.mark.usefixtures("lab_host", "lab_down_after")]

__all__ = ["installed"]  # the wheel, built and installed once for this module


@pytest.fixture(scope="module")
def lab_down_after() -> Iterator[None]:
    run_cli("lab", "down")  # a lab another module left (the containers' names are the lab's, whoever made them)
    yield
    run_cli("lab", "down")


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


def test_the_installed_command_brings_up_bare_nodes_and_serves_lab_tiny(installed: Installed) -> None:
    brings_up_the_lab_and_serves_lab_tiny(installed)


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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKPLAY_", "ANSIBLE_", "PYTHONPATH"))}
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
