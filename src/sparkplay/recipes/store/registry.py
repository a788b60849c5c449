"""A floating image tag (none, or `latest`) resolved to the digest it names now, once, at apply time.

Every rank must run the same image bytes on every run; a tag can move
between two `docker pull`s. `sparkplay apply` asks the registry (the OCI
distribution API: a HEAD of the manifest, with the anonymous bearer token
the registry's challenge names) which digest the tag points at, and records
`name:tag@digest` in the inventory; the recipe lookup then serves that
reference. Only the digest header is read; nothing is pulled.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable

from sparkplay import imageref
from sparkplay.errors import BadInput, SparkplayError
from sparkplay.recipes.store import fetch

DOCKER_HUB = "registry-1.docker.io"
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
TIMEOUT_S = 15.0


class RegistryError(SparkplayError):
    """The registry could not say which digest a tag names; nothing was recorded."""


def split(image: str) -> tuple[str, str, str]:
    """(registry host, repository, tag) of a reference, Docker's defaults filled in."""
    name, _, _digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = "latest"
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest, tag
    return DOCKER_HUB, name if "/" in name else f"library/{name}", tag


def _scheme(host: str) -> str:
    hostname = urllib.parse.urlsplit(f"//{host}").hostname
    return "http" if fetch._is_loopback(hostname) else "https"  # plain http only on this machine (tests)


def _request(
    url: str, headers: dict[str, str], method: str = "GET", origin: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One request under recipe import's fetch policy, from `origin` (the registry's manifest URL): the URL
    and every redirect https, the same scheme, never inward (loopback, private, link-local) from a public
    registry, at most fetch.MAX_REDIRECTS; a registry on this machine (tests, a local mirror) stays there."""
    origin = origin or url
    try:
        fetch.check_hop(origin, url, "names")
        request = urllib.request.Request(url, headers={"User-Agent": "sparkplay", **headers}, method=method)  # noqa: S310
        with fetch.guarded_opener(origin).open(request, timeout=TIMEOUT_S) as response:
            return response.status, dict(response.headers), response.read(64 * 1024)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), b""
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, BadInput):
            raise _refused(exc.reason) from None
        raise
    except BadInput as exc:
        raise _refused(exc) from None


def _refused(exc: BadInput) -> RegistryError:
    return RegistryError(f"the registry lookup stopped: {exc.problem}", "pin the image's digest yourself")


def _token(challenge: str, repository: str, origin: str) -> str:
    """The anonymous pull token a `WWW-Authenticate: Bearer realm=...` challenge offers."""
    fields = dict(CHALLENGE.findall(challenge))
    realm = fields.get("realm")
    if not challenge.lower().startswith("bearer") or not realm:
        raise RegistryError("the registry asks for credentials sparkplay does not have", "pin a digest yourself")
    first, there = urllib.parse.urlsplit(origin), urllib.parse.urlsplit(realm)
    if there.netloc != first.netloc and fetch.internal(there.hostname):
        # even from a registry the user named there: its own address only, never another service inward
        raise _refused(BadInput(f"{origin} names {realm!r}, another address on this machine or network", ""))
    query = {"service": fields.get("service", ""), "scope": fields.get("scope") or f"repository:{repository}:pull"}
    status, _, body = _request(f"{realm}?{urllib.parse.urlencode(query)}", {}, origin=origin)
    if status != 200:
        raise RegistryError(f"the registry's token service answered HTTP {status}", "pin a digest yourself")
    data = json.loads(body or b"{}")
    token = data.get("token") or data.get("access_token")
    if not isinstance(token, str):
        raise RegistryError("the registry's token service gave no token", "pin a digest yourself")
    return token


def named_by_user(host: str, trusted: Iterable[str]) -> bool:
    """Whether the inventory's own image list (serve_trusted_images) names a repository on registry `host`:
    an entry of its own, not the catch-all `*`."""
    return any(str(entry) != "*" and split(str(entry).removesuffix("/*") + "/x")[0] == host for entry in trusted)


def resolve(image: str, trusted: Iterable[str] = ()) -> str:
    """`name:tag@sha256:...` for a floating reference; a pinned one is returned as it is. The image is the
    recipe's, so its registry is held to recipe import's fetch policy: one on this machine or a private
    network is contacted only where the user named it first (`trusted`: the inventory's serve_trusted_images)."""
    if not imageref.is_reference(image):
        raise RegistryError(f"{image!r} is not an image reference", "fix engine.image in the recipe")
    if imageref.pinned(image):
        return image
    host, repository, tag = split(image)
    hostname = urllib.parse.urlsplit(f"//{host}").hostname
    if fetch.internal(hostname) and not named_by_user(host, trusted):
        raise RegistryError(
            f"the recipe's image {image} names a registry at {host}, an address on this machine or a private "
            "network, which the inventory does not name",
            f"add {host}/{repository} to serve_trusted_images if it is your registry, or pin a digest yourself",
        )
    url = f"{_scheme(host)}://{host}/v2/{repository}/manifests/{tag}"
    try:
        status, headers, _ = _request(url, {"Accept": ACCEPT}, "HEAD")
        if status == 401:
            challenge = headers.get("WWW-Authenticate") or headers.get("Www-Authenticate") or ""
            token = _token(challenge, repository, url)
            status, headers, _ = _request(url, {"Accept": ACCEPT, "Authorization": f"Bearer {token}"}, "HEAD")
    except (OSError, ValueError) as exc:
        raise RegistryError(
            f"cannot reach the registry of {image} ({exc})", "check the network, or pin a digest"
        ) from None
    if status != 200:
        raise RegistryError(f"the registry answered HTTP {status} for {image}", "check the image name and tag")
    digest = headers.get("Docker-Content-Digest") or headers.get("docker-content-digest") or ""
    if not DIGEST.match(digest):
        raise RegistryError(f"the registry named no sha256 digest for {image}", "pin a digest yourself")
    name = image.partition("@")[0]
    return f"{name if ':' in name.rsplit('/', 1)[-1] else name + ':' + tag}@{digest}"
