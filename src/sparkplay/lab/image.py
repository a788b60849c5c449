"""The lab node image: Debian forky with systemd, built locally and cached by recipe hash.

Nothing can be pulled in the places sparkplay is tested, so the image is
made with debootstrap and `docker import`. Its tag is a hash of everything
that decides its content (suite, packages, the fixes below, the files
shipped in image_files/), so a changed recipe rebuilds and an unchanged
one is reused.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from sparkplay.errors import MissingPrerequisite, SparkplayError
from sparkplay.lab import dockercli

IMAGE_REPO = "sparkplay-lab-node"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

# Bump to force a rebuild that nothing else here would cause (e.g. a moved mirror snapshot).
BUILD_FORMAT = 1


@dataclass(frozen=True)
class ImageRecipe:
    """Everything that decides the image's content; its hash is the tag."""

    suite: str = "forky"
    variant: str = "minbase"
    # What a DGX OS node has that Ansible and the roles rely on: python3 for
    # modules, sshd/rsync for the checkpoint mirror, iproute2/ping for the fabric.
    packages: tuple[str, ...] = (
        "systemd",
        "systemd-sysv",
        "dbus",
        "python3",
        "python3-apt",
        "iproute2",
        "iputils-ping",
        "openssh-server",
        "openssh-client",
        "rsync",
        "sudo",
        "ca-certificates",
        "curl",
        "procps",
        "netbase",
    )
    # firstboot fails with no console; wait-online stalls boot for 2 minutes.
    masked_units: tuple[str, ...] = (
        "systemd-firstboot.service",
        "systemd-networkd-wait-online.service",
    )
    # (path in image, file in image_files/, mode)
    files: tuple[tuple[str, str, int], ...] = (
        ("/etc/systemd/system/sparkplay-lab-hostkeys.service", "sparkplay-lab-hostkeys.service", 0o644),
        ("/etc/apt/apt.conf.d/99sparkplay-lab", "99sparkplay-lab", 0o644),
    )
    enabled_units: tuple[tuple[str, str], ...] = (("multi-user.target", "sparkplay-lab-hostkeys.service"),)
    init: str = "/lib/systemd/systemd"
    build_format: int = field(default=BUILD_FORMAT)

    def file_content(self, name: str) -> bytes:
        return resources.files("sparkplay.lab").joinpath("image_files", name).read_bytes()

    def digest(self) -> str:
        payload = asdict(self)
        payload["file_sha256"] = {
            name: hashlib.sha256(self.file_content(name)).hexdigest() for _, name, _ in self.files
        }
        # the build steps are part of the recipe: changing one rebuilds the image
        payload["steps"] = [inspect.getsource(step) for step in (_debootstrap, _apply_fixes, _import)]
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPO}:{self.digest()}"


def image_exists(tag: str) -> bool:
    return bool(dockercli.inspect("image", [tag]))


def ensure_image(
    recipe: ImageRecipe,
    *,
    mirror: str | None = None,
    say: Callable[[str], None] = print,
) -> tuple[str, bool]:
    """Return (tag, built): reuse the cached image or build it."""
    tag = recipe.tag
    if image_exists(tag):
        return tag, False
    say(f"building lab image {tag} (debootstrap {recipe.suite}, about a minute)")
    with tempfile.TemporaryDirectory(prefix="sparkplay-lab-rootfs.", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        _debootstrap(recipe, rootfs, mirror or os.environ.get("SPARKPLAY_LAB_MIRROR", DEFAULT_MIRROR))
        _apply_fixes(recipe, rootfs)
        _import(recipe, rootfs, tag)
    return tag, True


def _debootstrap(recipe: ImageRecipe, rootfs: Path, mirror: str) -> None:
    binary = shutil.which("debootstrap")
    if binary is None:
        raise MissingPrerequisite(
            "debootstrap is not installed", "as root: make setup (or apt-get install debootstrap)"
        )
    scripts = Path("/usr/share/debootstrap/scripts")
    # Older debootstraps lack a forky script; sid's builds any testing suite.
    script = scripts / recipe.suite if (scripts / recipe.suite).exists() else scripts / "sid"
    cmd = [
        binary,
        f"--variant={recipe.variant}",
        f"--include={','.join(recipe.packages)}",
        recipe.suite,
        str(rootfs),
        mirror,
        str(script),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        tail = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        last = tail[-1] if tail else f"exit {proc.returncode}"
        raise SparkplayError(
            f"debootstrap {recipe.suite} failed: {last}",
            "check that the Debian archive is reachable or set SPARKPLAY_LAB_MIRROR",
        )


def _apply_fixes(recipe: ImageRecipe, rootfs: Path) -> None:
    # "uninitialized" (not empty) makes each container a first boot with its
    # own machine-id; deleting the host keys gives each its own ssh identity.
    (rootfs / "etc/machine-id").write_text("uninitialized\n")
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    systemd_dir = rootfs / "etc/systemd/system"
    for unit in recipe.masked_units:
        link = systemd_dir / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    for dest, name, mode in recipe.files:
        target = rootfs / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(recipe.file_content(name))
        target.chmod(mode)
    for wanted_by, unit in recipe.enabled_units:
        wants = systemd_dir / f"{wanted_by}.wants"
        wants.mkdir(parents=True, exist_ok=True)
        link = wants / unit
        link.unlink(missing_ok=True)
        link.symlink_to(f"/etc/systemd/system/{unit}")
    # The .debs are not needed again. Package lists stay: a node (like a real
    # one) has a usable apt cache, so roles install without an update first.
    for entry in (rootfs / "var/cache/apt/archives").glob("*.deb"):
        entry.unlink()


def _import(recipe: ImageRecipe, rootfs: Path, tag: str) -> None:
    changes = [
        f'CMD ["{recipe.init}"]',
        "ENV container=docker",
        f"LABEL sparkplay.lab.recipe={recipe.digest()}",
    ]
    import_args = [dockercli.docker_binary(), "import"]
    for change in changes:
        import_args += ["-c", change]
    import_args += ["-", tag]
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    try:
        proc = subprocess.run(import_args, stdin=tar.stdout, capture_output=True, text=True, timeout=600, check=False)
    finally:
        if tar.stdout:
            tar.stdout.close()
        tar_rc = tar.wait()
    if tar_rc != 0 or proc.returncode != 0:
        raise SparkplayError(f"docker import of the lab image failed: {proc.stderr.strip() or f'tar exit {tar_rc}'}")
