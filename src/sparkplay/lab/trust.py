"""The lab's nodes trust the certificate authorities the host added (a TLS-inspecting proxy on the way out).

A real node's administrator installs such a CA on the node; the lab does the
same from the host's /usr/local/share/ca-certificates, so what a node
downloads over HTTPS (llama-benchy from the package index) works in the lab
exactly where it works on the host. Nothing is copied where the host added
none.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sparkplay.lab import dockercli

HOST_CAS = Path("/usr/local/share/ca-certificates")
NODE_CAS = "/usr/local/share/ca-certificates/sparkplay-lab"


def host_cas(folder: Path = HOST_CAS) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.crt")) if p.is_file()} if folder.is_dir() else {}


def trust(container: str, cas: dict[str, bytes]) -> str | None:
    """Install `cas` in the node's store unless the same certificates are there; say what happened."""
    if not cas:
        return None
    have = dockercli.sha256_in(container, NODE_CAS, "*.crt")
    wanted = {name: hashlib.sha256(data).hexdigest() for name, data in cas.items()}
    if have == wanted:
        return None
    script = f"rm -rf {NODE_CAS} && mkdir -p {NODE_CAS}"
    dockercli.docker(["exec", container, "sh", "-c", script])
    for name, data in cas.items():
        dockercli.docker(["exec", "-i", container, "sh", "-c", f"cat > {NODE_CAS}/{name}"], input_bytes=data)
    dockercli.docker(["exec", container, "update-ca-certificates", "--fresh"])
    return f"{container} trusts the host's {len(cas)} added certificate authorit{'y' if len(cas) == 1 else 'ies'}"
