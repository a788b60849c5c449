"""`ansible-test sanity` on the collection as Galaxy receives it: the built tarball, installed alone.

Run by `make sanity` (and so by `make unit` and `make lint`). The tarball holds only what ships
(galaxy.yml's build_ignore drops src/, tests/, benchmarks/ ...), so this checks what Galaxy checks.

ansible-test runs each sanity test in a virtualenv of its own and bootstraps pip in it with a script
it downloads from ci-files.testing.ansible.com. Where that host cannot be reached (a closed network,
this project's CI), the bootstrap is this Python's own ensurepip wheel, which then installs the pip
version ansible-test asks for from the package index: the same pip, a different way to get it. Both
the bootstrap script and the virtualenvs live in a HOME of our own (.cache/ansible-test), never the
user's ~/.ansible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from types import SimpleNamespace

PROJECT = Path(__file__).resolve().parent.parent
HOME = PROJECT / ".cache" / "ansible-test"
BIN = Path(sys.executable).parent
BOOTSTRAP_URL = "https://ci-files.testing.ansible.com/ansible-test/get-pip-{version}.py"
# get-pip's own options that plain `pip install` does not take
BOOTSTRAP = """\
# Written by sparkplay's scripts/collection_sanity.py: the download host was unreachable.
import ensurepip, glob, os, sys
sys.path.insert(0, glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl"))[0])
from pip._internal.cli.main import main
sys.exit(main(["install", "--upgrade", *[a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]]))
"""


def pip_version() -> str:
    """The pip ansible-test bootstraps into its virtualenvs (it asks for one version, the same everywhere)."""
    from ansible_test._internal.python_requirements import get_venv_packages

    python = SimpleNamespace(version=f"{sys.version_info.major}.{sys.version_info.minor}")
    return get_venv_packages(python)["pip"]  # type: ignore[arg-type]


def seed_bootstrap() -> None:
    version = pip_version()
    cached = HOME / ".ansible" / "test" / "cache" / f"get_pip_{version.replace('.', '_')}.py"
    if cached.is_file():
        return
    cached.parent.mkdir(parents=True, exist_ok=True)
    url = BOOTSTRAP_URL.format(version=version)
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 (a fixed https address)
            text = answer.read().decode()
    except OSError as error:
        print(f"sanity: {url} unreachable ({error}); bootstrapping pip from ensurepip")
        text = BOOTSTRAP
    partial = cached.with_suffix(".partial")
    partial.write_text(text)
    partial.replace(cached)


def install_collection(work: Path) -> Path:
    """Build the tarball from this tree and unpack it where ansible-test wants a collection."""
    dist = work / "dist"
    build = [BIN / "ansible-galaxy", "collection", "build", "--output-path", dist, PROJECT]
    subprocess.run(build, check=True, stdout=subprocess.DEVNULL)
    (tarball,) = dist.glob("*.tar.gz")
    root = work / "ansible_collections" / "sparkplay" / "spark"
    root.mkdir(parents=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(root, filter="data")
    # tests/ does not ship (build_ignore), but ansible-test reads the ignore files from there
    (root / "tests" / "sanity").mkdir(parents=True)
    for ignores in (PROJECT / "tests" / "sanity").glob("ignore-*.txt"):
        shutil.copy(ignores, root / "tests" / "sanity" / ignores.name)
    return root


def main() -> int:
    seed_bootstrap()
    work = Path(tempfile.mkdtemp(prefix="sparkplay-sanity-"))
    try:
        root = install_collection(work)
        env = {**os.environ, "HOME": str(HOME), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        python = f"{sys.version_info.major}.{sys.version_info.minor}"
        command = [BIN / "ansible-test", "sanity", "--venv", "--python", python, "--color", "no", *sys.argv[1:]]
        return subprocess.run(command, cwd=root, env=env, check=False).returncode
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
