"""Standalone programs the roles install on the nodes (standard library only)."""

from __future__ import annotations

from importlib import resources


def path_of(name: str) -> str:
    """Filesystem path of a node tool shipped in this package."""
    return str(resources.files(__name__).joinpath(name))


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
    "nvfp4/overlay.py",
    "nvfp4/safetensors.py",
    "nvfp4/testmodel.py",
)


BUNDLES = {"nvfp4": NVFP4_NODE_FILES}


def _ckpt_files() -> list[dict[str, str]]:
    """The checkpoint tool's package (every module of nodetools/ckpt), beside its launcher on the node."""
    root = resources.files(__name__)
    found = []
    for folder in ("ckpt", "ckpt/transports"):
        for item in sorted(root.joinpath(folder).iterdir(), key=lambda p: p.name):
            if item.name.endswith(".py"):
                found.append({"src": str(item), "rel": f"{folder}/{item.name}"})
    return found


def package_files(bundle: str) -> list[dict[str, str]]:
    """[{src, rel}] for the package files of a bundle the roles copy to nodes ('nvfp4', 'ckpt')."""
    if bundle == "ckpt":
        return _ckpt_files()
    root = resources.files("sparkplay")
    return [{"src": str(root.joinpath(name)), "rel": name} for name in BUNDLES[bundle]]
