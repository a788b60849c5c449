"""Standalone programs the roles install on the nodes (standard library only)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tempfile
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

# The converter as it runs on a node: these modules need only numpy (and PyTorch when present);
# kernel.c is compiled there by the system C compiler when one is installed.
NVFP4_NODE_FILES = (
    "__init__.py",
    "fsutil.py",
    "nvfp4/__init__.py",
    "nvfp4/__main__.py",
    "nvfp4/atlas.py",
    "nvfp4/gpu.py",
    "nvfp4/kernel.c",
    "nvfp4/kernel.py",
    "nvfp4/modelopt.py",
    "nvfp4/outputs.py",
    "nvfp4/overlay.py",
    "nvfp4/routes.py",
    "nvfp4/safetensors.py",
    "nvfp4/source.py",
    "nvfp4/testmodel.py",
    "nvfp4/verify.py",
)


BUNDLES = {"nvfp4": NVFP4_NODE_FILES}
# what a node tool carries besides its modules: the gateway's page and the library it vendors (serve/ui)
ASSETS = (".html", ".js", ".css", ".uPlot")


def app(name: str) -> str:
    """Path of a node tool built as one executable zip (the package `nodetools/NAME` and a __main__).

    Built on the controller from the package's own files, byte for byte the
    same for the same sources (fixed timestamps, sorted entries), so the
    role's copy is one file and idempotent. Cached by content hash.
    """
    root = resources.files(__name__)
    files: list[tuple[str, bytes]] = []
    for folder in _folders(root.joinpath(name), name):
        for item in sorted(root.joinpath(folder).iterdir(), key=lambda p: p.name):
            if item.name.endswith(".py") or item.name.endswith(ASSETS):
                files.append((f"{folder}/{item.name}", item.read_bytes()))
    files.append(("__main__.py", f"import sys\n\nfrom {name}.cli import main\n\nsys.exit(main())\n".encode()))
    digest = hashlib.sha256(b"".join(n.encode() + b"\0" + d for n, d in files)).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkplay" / "nodetools"
    target = cache / f"{name}-{digest}.pyz"
    if target.is_file():
        return str(target)
    cache.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "a", zipfile.ZIP_DEFLATED) as archive:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{target.name}.")
    with os.fdopen(fd, "wb") as fh:
        fh.write(buffer.getvalue())
    Path(tmp).replace(target)  # whole or not at all: another play may read it at once
    return str(target)


def app_sha256(name: str) -> str:
    """The sha256 of the tool `app` builds, to tell whether a node has it already."""
    return hashlib.sha256(Path(app(name)).read_bytes()).hexdigest()


def app_base64(name: str) -> str:
    """The tool of `app` as base64, for a role that writes it with its other files in one module call."""
    return base64.b64encode(Path(app(name)).read_bytes()).decode("ascii")


def _folders(top: Any, name: str) -> list[str]:
    found = [name]
    for item in sorted(top.iterdir(), key=lambda p: p.name):
        if item.is_dir() and item.joinpath("__init__.py").is_file():
            found += _folders(item, f"{name}/{item.name}")
    return found


def package_files(bundle: str) -> list[dict[str, str]]:
    """[{src, rel}] for the package files of a bundle the roles copy to nodes ('nvfp4')."""
    root = resources.files("sparkplay")
    return [{"src": str(root.joinpath(name)), "rel": name} for name in BUNDLES[bundle]]
