"""sparkplay installed the way its users install it, run from an empty folder. Marked `lab`.

Real: the wheel built from this tree (`pip wheel`), installed with its dependencies into a fresh virtualenv outside
the checkout (what pipx does), run with a home folder of its own and no SPARKPLAY_PROJECT_DIR, from a folder with
nothing in it. The lab brought up and lab-tiny served by that installed command, and the collection's serve playbook
run by FQCN, are tests/test_install_bare_lab.py (`make test-stack`, for CI's time: issue 52).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import steps
from tests.conftest import PROJECT

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
        own = ("SPARKPLAY_", "XDG_", "VIRTUAL_ENV", "PYTHONPATH")  # a user's shell holds none of the checkout's
        env = {k: v for k, v in os.environ.items() if not k.startswith(own)}
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
    yield where


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
