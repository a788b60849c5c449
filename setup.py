"""The wheel carries the Ansible project with the Python package.

`pip install` / `pipx install` of a wheel puts the playbooks, roles, plugins,
ansible.cfg, the entry playbooks and the shipped recipe catalog inside the
package as `sparkplay/_project` (read-only), so an installed `sparkplay`
runs from any folder (paths.py). A checkout (and `pip install -e`) runs from
its own tree; nothing is copied then. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# the project as ansible-runner runs it; the lab's and the user's own inventories are data, not code
PROJECT_DIRS = ("playbooks", "roles", "plugins", "recipes", "inventory/sample")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".*", "molecule")  # a role's scenario is the checkout's


def project_files() -> list[str]:
    return ["ansible.cfg", *sorted(p.name for p in HERE.glob("*.yml") if p.name != "galaxy.yml")]


class BuildWithProject(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "sparkplay" / "_project"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in project_files():
            shutil.copy2(HERE / name, target / name)
        for folder in PROJECT_DIRS:
            shutil.copytree(HERE / folder, target / folder, ignore=SKIPPED)


setup(cmdclass={"build_py": BuildWithProject})
