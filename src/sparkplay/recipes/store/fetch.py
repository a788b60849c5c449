"""Fetching a recipe over HTTP: HTTPS (or an explicit loopback URL) only, bounded in every way.

A recipe URL comes from the internet, so the fetch is careful: connect and
total timeouts, a 1 MiB cap read incrementally (a lying Content-Length does
not matter), at most 3 redirects, each keeping the scheme and never leading
to a loopback, link-local, private or reserved address unless the user named
such a URL first (a public recipe page cannot aim sparkplay at the
machine's own services or a cloud's metadata address), and a JSON object
required. Errors are one line naming the problem and the fix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import ipaddress
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sparkplay.errors import BadInput, SparkplayError
from sparkplay.recipes import model

MAX_BYTES = 1 << 20
MAX_REDIRECTS = 3
CONNECT_TIMEOUT_S = 10.0
TOTAL_TIMEOUT_S = 30.0


class FetchError(SparkplayError):
    """The URL could not be fetched; nothing was written."""


@dataclass(frozen=True)
class Fetched:
    url: str
    body: bytes
    sha256: str
    data: dict[str, Any] | None = None  # the parsed object, for fetch_json
    content_type: str = ""


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and _is_loopback(parts.hostname):
        return
    raise BadInput(f"refusing to fetch {url!r}", "use an https:// URL (plain http only for 127.0.0.1 or localhost)")


def internal(host: str | None) -> bool:
    """Whether `host` is, or resolves to, an address of this machine or a private network."""
    if not host:
        return False
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False  # it cannot be reached either
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        mapped = getattr(address, "ipv4_mapped", None) or address
        if (
            mapped.is_loopback
            or mapped.is_private
            or mapped.is_link_local
            or mapped.is_reserved
            or mapped.is_multicast
            or mapped.is_unspecified
        ):
            return True
    return False


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS

    def __init__(self, origin: str) -> None:
        super().__init__()
        self.origin = urlsplit(origin)
        self.origin_internal = internal(self.origin.hostname)

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN202
        check_hop(self.origin.geturl(), newurl, "redirects to", self.origin_internal)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def check_hop(origin: str, url: str, how: str = "redirects to", origin_internal: bool | None = None) -> None:
    """The rule for every URL a server hands on (a redirect, a registry's token realm): https (plain http only
    on loopback), the origin's scheme, and no address of this machine or a private network unless the
    origin itself was one (then the user, or the recipe's own registry, named such a place first)."""
    check_url(url)  # never a downgrade to plain http on the internet
    first, new = urlsplit(origin), urlsplit(url)
    if new.scheme != first.scheme:
        raise BadInput(
            f"{origin} {how} {url!r}, another scheme", "give the final https:// URL yourself if you trust it"
        )
    if origin_internal is None:
        origin_internal = internal(first.hostname)
    if internal(new.hostname) and not origin_internal:
        raise BadInput(
            f"{origin} {how} {url!r}, an address on this machine or a private network",
            "give that URL yourself if you mean it",
        )


def guarded_opener(origin: str) -> urllib.request.OpenerDirector:
    """An opener whose redirects follow check_hop from `origin`, at most MAX_REDIRECTS of them."""
    return urllib.request.build_opener(_Redirects(origin))


def _timeout(env: str, default: float) -> float:
    try:
        return float(os.environ.get(env, default))
    except ValueError:
        return default


@contextlib.contextmanager
def _cut_at(response: Any, deadline: float) -> Iterator[None]:
    """Shut the response's socket down at the deadline, so even a receive in progress ends then."""
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)

    def cut() -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut) if sock is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


def fetch_json(
    url: str,
    *,
    connect_timeout: float | None = None,
    total_timeout: float | None = None,
    max_bytes: int = MAX_BYTES,
) -> Fetched:
    """GET a JSON object (see fetch)."""
    fetched = fetch(url, connect_timeout=connect_timeout, total_timeout=total_timeout, max_bytes=max_bytes)
    return dataclasses.replace(fetched, data=parse_json_object(fetched.body, url, fetched.content_type))


def fetch(
    url: str,
    *,
    connect_timeout: float | None = None,
    total_timeout: float | None = None,
    max_bytes: int = MAX_BYTES,
) -> Fetched:
    """GET a recipe's bytes, whatever its format. Timeouts default to $SPARKPLAY_FETCH_CONNECT_TIMEOUT_S
    and $SPARKPLAY_FETCH_TOTAL_TIMEOUT_S, else 10 s and 30 s; the total one bounds the whole transfer."""
    connect_timeout = connect_timeout or _timeout("SPARKPLAY_FETCH_CONNECT_TIMEOUT_S", CONNECT_TIMEOUT_S)
    total_timeout = total_timeout or _timeout("SPARKPLAY_FETCH_TOTAL_TIMEOUT_S", TOTAL_TIMEOUT_S)
    check_url(url)
    opener = guarded_opener(url)
    request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "sparkplay"})  # noqa: S310
    deadline = time.monotonic() + total_timeout
    late = FetchError(f"{url} took longer than {total_timeout:.0f} s", "try again later")
    try:
        with opener.open(request, timeout=connect_timeout) as response, _cut_at(response, deadline):
            chunks: list[bytes] = []
            size = 0
            while True:
                try:
                    # read1: whatever one receive brings, so a server that trickles cannot hold the loop
                    chunk = response.read1(64 * 1024)
                except OSError:
                    if time.monotonic() >= deadline:
                        raise late from None
                    raise
                if time.monotonic() >= deadline:
                    raise late
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise FetchError(
                        f"{url} is larger than {max_bytes // 1024} KiB", "a recipe is small; check the URL"
                    )
                chunks.append(chunk)
            final_url = response.geturl()
            content_type = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code in (301, 302, 303, 307, 308):
            raise FetchError(f"{url} redirects more than {MAX_REDIRECTS} times", "use the final URL") from None
        raise FetchError(f"{url} answered HTTP {exc.code} {exc.reason}", "check the recipe's URL") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, BadInput):
            raise reason from None
        if isinstance(reason, TimeoutError):
            raise FetchError(f"{url} did not answer within {connect_timeout:.0f} s", "try again later") from None
        raise FetchError(f"cannot reach {url} ({reason})", "check the address and your network") from None
    except TimeoutError:
        raise FetchError(f"{url} did not answer within {connect_timeout:.0f} s", "try again later") from None
    except BadInput:
        raise
    body = b"".join(chunks)
    return Fetched(final_url, body, hashlib.sha256(body).hexdigest(), None, content_type)


def parse_json_object(body: bytes, where: str, content_type: str = "") -> dict[str, Any]:
    try:
        data = model.parsed(lambda: json.loads(body.decode("utf-8")), where)
    except (UnicodeDecodeError, json.JSONDecodeError):
        looks_html = "html" in content_type.lower() or body.lstrip()[:1] == b"<"
        what = "an HTML page" if looks_html else "not JSON"
        raise BadInput(
            f"{where} is {what}, not a JSON recipe", "use the recipe's API URL (…/api/v1/recipes/<slug>.json)"
        ) from None
    if not isinstance(data, dict):
        raise BadInput(
            f"{where} holds a JSON {type(data).__name__}, not a recipe object", "use the URL of a single recipe"
        )
    return data


def is_json(text: str) -> bool:
    """Whether the text parses as JSON (one nested past Python's limit is JSON too: its reader names that)."""
    try:
        json.loads(text)
    except RecursionError:
        return True
    except ValueError:
        return False
    return True
