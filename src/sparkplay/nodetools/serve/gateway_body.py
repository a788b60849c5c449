"""What the gateway reads of a request before it forwards it: the path it may forward, and the body's `model`.

Both are read from bytes any local client sends, so both are bounded and strict: a path is forwarded only in
its normalised origin form under /v1/ (no dot segments, no escapes, no absolute form), and `model` is found by
walking the body's top level without building the rest of it (a 16 MiB prompt costs a scan, not a tree of
Python objects; a body nested past MAX_DEPTH is refused, not recursed into). The engine parses the whole body
itself; what matters here is that the gateway and the engine read the same `model`, so a key spelt with
escapes counts as `model` and a body with two `model` keys is refused.
"""

from __future__ import annotations

import json
import re
import time

MAX_DEPTH = 128
# the CPU one body's scan may take: a 16 MiB body of `[{},{},...]` (millions of brackets, each a step of the
# walk) is refused past it instead of holding the gateway for seconds; a real request (a prompt, a list of
# token arrays) has far fewer brackets than its bytes and scans in milliseconds
SCAN_BUDGET_S = 0.25
_CHECK_EVERY = 4096  # structural characters between looks at the clock
# one segment of a forwarded path: what OpenAI's and the engines' routes are made of (no '%', so no escapes)
PATH = re.compile(r"/v1(?:/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+\Z")
_WS = re.compile(rb"[ \t\r\n]*")
# the rest of a JSON string after its opening quote: plain runs and escape pairs, up to the closing quote
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"-?[0-9][0-9eE.+-]*|true|false|null")
_STRUCTURE = re.compile(rb'[\[\]{}"]')
_CLOSE = {ord("{"): ord("}"), ord("["): ord("]")}


class BadBody(ValueError):
    """The body is not a JSON object the gateway can route (the message says what is wrong)."""


def forwarded_path(raw: str) -> str | None:
    """The path to forward (`raw` as the client sent it), or None when it is not a plain /v1/... path:
    dot segments, percent escapes, a query, an absolute or authority form are never passed on."""
    return raw if PATH.match(raw) else None


def model_of(body: bytes, max_depth: int = MAX_DEPTH, budget_s: float = SCAN_BUDGET_S) -> str | None:
    """The top-level `model` of a JSON object body (None when it has none); BadBody when the body is not one
    JSON object, nests deeper than `max_depth`, names `model` twice, gives it a value that is not a string, or
    takes more than `budget_s` of CPU to walk (the thread's own time: a scan off the loop is not charged for
    the loop's)."""
    deadline = time.thread_time() + budget_s
    pos = _skip_ws(body, 0)
    if body[pos : pos + 1] != b"{":
        raise BadBody("the body is not a JSON object")
    pos = _skip_ws(body, pos + 1)
    found: str | None = None
    seen = False
    if body[pos : pos + 1] == b"}":
        return _end(body, pos + 1, None)
    while True:
        if body[pos : pos + 1] != b'"':
            raise BadBody(f"a key was expected at byte {pos}")
        end = _string_end(body, pos)
        key = _decode(body[pos:end])
        pos = _skip_ws(body, end)
        if body[pos : pos + 1] != b":":
            raise BadBody(f"':' was expected at byte {pos}")
        pos = _skip_ws(body, pos + 1)
        start = pos
        pos = _skip_value(body, pos, max_depth, deadline)
        if key == "model":
            if seen:
                raise BadBody("the body names `model` twice")
            seen = True
            if body[start : start + 1] == b'"':
                found = _decode(body[start:pos])
            elif body[start:pos] != b"null":
                raise BadBody("`model` is not a string")
        pos = _skip_ws(body, pos)
        mark = body[pos : pos + 1]
        if mark == b"}":
            return _end(body, pos + 1, found)
        if mark != b",":
            raise BadBody(f"',' or '}}' was expected at byte {pos}")
        pos = _skip_ws(body, pos + 1)


# RFC 2046's boundary: 1 to 70 characters of a set, maybe quoted
_BCHARS = "-0-9A-Za-z'()+_,./:=?"
_BOUNDARY = re.compile(
    rf"""^multipart/form-data\s*;(?:.*;)?\s*boundary=(?:"([{_BCHARS} ]{{0,69}}[{_BCHARS}])"|([{_BCHARS}]{{1,70}}))"""
    r"\s*(?:;.*)?\Z",
    re.IGNORECASE,
)
_MODEL_PART = re.compile(rb'^content-disposition:\s*form-data\s*;\s*name="model"\s*\Z', re.IGNORECASE | re.MULTILINE)


def model_of_form(body: bytes, content_type: str) -> str | None:
    """The `model` field of a multipart/form-data body (OpenAI's audio routes send the file beside it); None
    when it has none; BadBody when it is not one such form or names `model` twice."""
    match = _BOUNDARY.match(content_type.strip())
    if match is None:
        raise BadBody("the body is multipart without a boundary the gateway can read")
    boundary = b"--" + (match.group(1) or match.group(2)).encode()
    parts = body.split(boundary)
    if len(parts) < 3 or not parts[-1].startswith(b"--"):
        raise BadBody("the multipart body does not end with its closing boundary")
    found: list[str] = []
    for part in parts[1:-1]:
        head, sep, value = part.partition(b"\r\n\r\n")
        if not sep or not head.startswith(b"\r\n") or not value.endswith(b"\r\n"):
            raise BadBody("a part of the multipart body is not headers, a blank line and a value")
        if _MODEL_PART.search(head):
            try:
                found.append(value[:-2].decode())
            except UnicodeDecodeError:
                raise BadBody("the form's model is not UTF-8") from None
    if len(found) > 1:
        raise BadBody("the form names `model` twice")
    return found[0] if found else None


def _end(body: bytes, pos: int, found: str | None) -> str | None:
    if _skip_ws(body, pos) != len(body):
        raise BadBody(f"bytes follow the JSON object at byte {pos}")
    return found


def _skip_ws(body: bytes, pos: int) -> int:
    match = _WS.match(body, pos)
    return match.end() if match else pos


def _string_end(body: bytes, pos: int) -> int:
    """The index after the string that opens at `pos`."""
    match = _STRING_REST.match(body, pos + 1)
    if match is None:
        raise BadBody(f"the string at byte {pos} does not end")
    return match.end()


def _decode(token: bytes) -> str:
    if b"\\" not in token:
        try:
            return token[1:-1].decode()
        except UnicodeDecodeError:
            raise BadBody("the body is not UTF-8") from None
    try:
        return str(json.loads(token))
    except ValueError:
        raise BadBody("a string of the body has a bad escape") from None


def _skip_value(body: bytes, pos: int, max_depth: int, deadline: float = float("inf")) -> int:
    """The index after the value that starts at `pos`: a string, a scalar, or a whole object or array (walked
    by its brackets and strings alone, with a stack of what is open, at most `max_depth` deep, and refused
    once the thread's CPU time passes `deadline`)."""
    first = body[pos : pos + 1]
    if first == b'"':
        return _string_end(body, pos)
    if first not in (b"{", b"["):
        match = _SCALAR.match(body, pos)
        if match is None:
            raise BadBody(f"a value was expected at byte {pos}")
        return match.end()
    stack = [_CLOSE[body[pos]]]
    pos += 1
    steps = 0
    while stack:
        steps += 1
        if steps % _CHECK_EVERY == 0 and time.thread_time() > deadline:
            raise BadBody("the body has too many brackets to route within the gateway's scan budget")
        match = _STRUCTURE.search(body, pos)
        if match is None:
            raise BadBody("the body ends inside an object or array")
        pos, mark = match.start(), body[match.start()]
        if mark == ord('"'):
            pos = _string_end(body, pos)
            continue
        if mark in _CLOSE:
            if len(stack) + 1 >= max_depth:  # +1: the top-level object holds this value
                raise BadBody(f"the body nests deeper than {max_depth}")
            stack.append(_CLOSE[mark])
        elif stack.pop() != mark:
            raise BadBody(f"a bracket at byte {pos} closes what it did not open")
        pos += 1
    return pos
