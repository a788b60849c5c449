"""Container image references, by the grammar Docker's distribution library defines.

    reference := name [ ":" tag ] [ "@" digest ]
    name      := [ domain "/" ] path-component ( "/" path-component )*

A recipe's image lands in `docker run`'s argv just before the engine's own
arguments, so anything that is not a reference (an option such as
`--privileged`, a sentence from a web page) must be refused before it gets
there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH}(?:/{_PATH})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?\Z"
)
MAX_NAME = 255


def is_reference(text: str) -> bool:
    """Whether text is a container image reference (a domain has '.', ':' or is localhost)."""
    found = REFERENCE.match(text)
    if not found:
        return False
    domain = found.group("domain")
    looks_like_host = domain and ("." in domain or ":" in domain or domain == "localhost" or domain.startswith("["))
    # otherwise `org/name` is a path of two components on Docker Hub, not a domain: it must be lower case
    if domain and not looks_like_host and not re.fullmatch(_PATH, domain):
        return False
    name = text.split("@", 1)[0].rsplit(":", 1)[0] if found.group("tag") else text.split("@", 1)[0]
    return len(name) <= MAX_NAME


def pinned(text: str) -> bool:
    """Whether the reference names an exact image (a digest), not a tag that can move."""
    found = REFERENCE.match(text)
    return bool(found and found.group("digest"))


def floating(text: str) -> bool:
    """No tag, or `latest`: the image can change under the same recipe."""
    found = REFERENCE.match(text)
    return bool(found and not found.group("digest") and found.group("tag") in (None, "latest"))


def repository(text: str) -> str | None:
    """The reference's name without tag or digest, Docker Hub's implicit `docker.io/` (and `library/`) made
    plain, so one image family reads the same however a recipe writes it."""
    found = REFERENCE.match(text)
    if not found or not is_reference(text):
        return None
    domain, path = found.group("domain"), found.group("path")
    hub = domain is None or domain in ("docker.io", "index.docker.io", "registry-1.docker.io")
    looks_like_host = domain and ("." in domain or ":" in domain or domain == "localhost" or domain.startswith("["))
    if domain and not looks_like_host:  # `org/name`: the first component is a path, not a domain
        return f"{domain}/{path}"
    if hub:
        return path.removeprefix("library/")
    return f"{domain}/{path}"


def image_sends(reads: Iterable[Any], leader_id: str) -> bool:
    """Whether rank 0 sends its image anywhere: a rank's `docker image inspect` read of it (each rank's
    registered result) names another ID, or none."""
    want = str(leader_id or "").strip()
    return bool(want) and any(str((r or {}).get("stdout") or "").strip() != want for r in reads)


def image_sent_line(stdout: str, image: str, host: str) -> str:
    """How `sparkplay-serve image-send` got `image` to `host`, in words."""
    try:
        said = json.loads(stdout or "{}")
    except ValueError:
        said = {}
    size = f"{int(said.get('bytes') or 0) / 2**20:.1f} MiB"
    if said.get("how") == "layers":
        return (
            f"{image} reached {host} in {said.get('seconds')} s: {said.get('layers_sent')} layer(s) it lacked, "
            f"{size} sent; {said.get('layers_held')} it held"
        )
    return f"{image} reached {host} whole in {said.get('seconds')} s ({size} sent): {said.get('why') or 'as asked'}"
