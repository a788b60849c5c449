"""The address vocabulary (sparkplay.addresses): one set of loopback names and one of wildcards, which every rule
that narrows, checks or connects reads."""

from __future__ import annotations

import pytest

from sparkplay import addresses


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.1.1", "::1", "[::1]", "localhost"])
def test_loopback_is_this_node_only(address):
    assert addresses.is_loopback(address) and not addresses.is_wildcard(address)


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "[::]", "*", ""])  # noqa: S104 - names matched
def test_a_wildcard_is_every_address_and_never_loopback(address):
    assert addresses.is_wildcard(address) and not addresses.is_loopback(address)


@pytest.mark.parametrize("address", ["192.168.100.10", "10.0.0.1", "fe80::1", "spark-a", "128.0.0.1", "0.0.0.1"])
def test_any_other_address_is_neither(address):
    assert not addresses.is_loopback(address) and not addresses.is_wildcard(address)


@pytest.mark.parametrize(
    ("bind", "client"),
    [
        ("0.0.0.0", "127.0.0.1"),  # noqa: S104 - a bind named, never made
        ("", "127.0.0.1"),
        ("*", "127.0.0.1"),
        ("[::]", "127.0.0.1"),
        ("::", "[::1]"),
        ("::1", "[::1]"),
        ("[::1]", "[::1]"),
        ("127.0.0.1", "127.0.0.1"),
        ("192.168.100.10", "192.168.100.10"),
        ("fe80::1", "[fe80::1]"),
    ],
)
def test_a_client_on_the_node_reaches_a_bind_where_it_answers(bind, client):
    assert addresses.client_address(bind) == client


def test_no_other_module_keeps_a_set_of_its_own():
    """One vocabulary (issue 58): a module that lists loopback or wildcard names again would drift from it."""
    from pathlib import Path

    import sparkplay

    root = Path(sparkplay.__file__).parent
    again = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "addresses.py"
        and "nodetools" not in p.parts  # the node's tools run alone, without the package
        and any(name in p.read_text() for name in ('"::1"', "'::1'", '"0.0.0.0", "::"', "LOOPBACK =", "WILDCARD"))
    )
    assert again == []
