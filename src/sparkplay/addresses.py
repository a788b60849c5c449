"""The address vocabulary: which bind addresses mean this node only (loopback) and which mean every address
(a wildcard), written once so that the importer's narrowing, the privilege boundary, the plan's cable bind, the
gateway's status and the CLI's scrape targets agree on them. Names, matched; nothing here binds.
"""

from __future__ import annotations

# where an engine's API and the gateway listen unless the user says otherwise (they have no authentication)
LOOPBACK_ADDRESS = "127.0.0.1"
LOOPBACK = frozenset({"127.0.0.1", "::1", "[::1]", "localhost"})
WILDCARD = frozenset({"0.0.0.0", "::", "[::]", "*", ""})  # noqa: S104 - names matched, never bound


def is_loopback(address: str) -> bool:
    """This node only: a loopback name, or any address of 127.0.0.0/8."""
    return address in LOOPBACK or address.startswith("127.")


def is_wildcard(address: str) -> bool:
    """Every address of the node (an empty bind is one too: the servers' default)."""
    return address in WILDCARD


def client_address(bind: str) -> str:
    """Where a client on the same node reaches a server bound to `bind` (an engine's API, the gateway)."""
    if bind == "::":
        return "[::1]"
    if is_wildcard(bind):
        return LOOPBACK_ADDRESS
    return f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind
