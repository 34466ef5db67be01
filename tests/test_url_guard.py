"""Unit tests of the SSRF guard's pure logic: no sockets, no DNS.

``resolve_host`` is replaced by a table for every test in this module, so a test that names a
public or private host never sends a DNS query, and the guard never connects to anything.
"""

from __future__ import annotations

import ipaddress
import socket

import pytest

from activities.guards import url_guard
from activities.guards.url_guard import (
    AllowList,
    HostNotFound,
    UrlRefused,
    forbidden_reason,
    parse_ip_literal,
    validate_url,
)

REAL_RESOLVE_HOST = url_guard.resolve_host
FAKE_DNS: dict[str, list[str]] = {
    "public.test": ["93.184.215.14"],
    "internal.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "mixed.test": ["93.184.215.14", "192.168.1.10"],
    "v6private.test": ["fd12:3456::1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "wiki.intranet.test": ["10.1.2.3"],
}


@pytest.fixture(autouse=True)
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Answer from FAKE_DNS; unknown names fail like NXDOMAIN. Returns the names looked up."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        if host not in FAKE_DNS:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return FAKE_DNS[host]

    monkeypatch.setattr(url_guard, "resolve_host", resolve)
    return asked


# ------------------------------------------------------------------------ address classes


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.2", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.5", "private"),
        ("172.16.4.4", "private"),
        ("192.168.0.1", "private"),
        ("100.64.0.1", "CGNAT"),
        ("100.127.255.254", "CGNAT"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("fd00::1", "unique local"),
        ("fc00::1", "unique local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of 169.254.169.254
        ("64:ff9b::a00:5", "private"),  # NAT64 of 10.0.0.5
        ("192.0.2.1", "non-public"),  # documentation range
    ],
)
def test_non_public_addresses_are_named(address: str, reason: str) -> None:
    verdict = forbidden_reason(ipaddress.ip_address(address))
    assert verdict is not None
    assert reason in verdict


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert forbidden_reason(ipaddress.ip_address(address)) is None


# ------------------------------------------------------------------------------ IP literals


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("[::1]", "::1"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("example.com", None),
        ("deadbeef", None),
        ("1.2.3.4 evil", None),
    ],
)
def test_ip_literals_are_read_like_inet_aton(host: str, expected: str | None) -> None:
    parsed = parse_ip_literal(host)
    assert (str(parsed) if parsed else None) == expected


# --------------------------------------------------------------------------- validate_url


async def refusal(url: str, allow: list[str] | None = None) -> str:
    with pytest.raises(UrlRefused) as caught:
        await validate_url(url, allow or [])
    return str(caught.value)


@pytest.mark.parametrize(
    ("url", "address", "reason"),
    [
        ("http://2130706433/", "127.0.0.1", "loopback"),
        ("http://0x7f.1/", "127.0.0.1", "loopback"),
        ("http://0177.1:8080/x", "127.0.0.1", "loopback"),
        ("http://[::ffff:169.254.169.254]/latest/meta-data", "::ffff:a9fe:a9fe", "link-local"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254", "link-local"),
        ("http://[fe80::1]/", "fe80::1", "link-local"),
        ("https://internal.test/", "10.0.0.5", "private"),
        ("http://metadata.test/", "169.254.169.254", "link-local"),
        ("http://v6private.test/", "fd12:3456::1", "unique local"),
        ("http://mapped.test/", "::ffff:7f00:1", "loopback"),
        ("http://Internal.TEST./", "10.0.0.5", "private"),
    ],
)
async def test_private_destinations_are_refused(url: str, address: str, reason: str) -> None:
    message = await refusal(url)
    assert message.startswith(f"Refused to crawl {url}")
    assert f"it resolves to {address}, " in message
    assert reason in message


async def test_any_private_address_refuses_the_host() -> None:
    message = await refusal("http://mixed.test/")
    assert "192.168.1.10, a private address" in message


async def test_public_host_passes_and_pins_the_validated_address(fake_dns: list[str]) -> None:
    target = await validate_url("https://public.test:8443/a?b=1#frag", [])
    assert target.address == "93.184.215.14"
    assert str(target.connect_url) == "https://93.184.215.14:8443/a?b=1"
    assert target.host_header == "public.test:8443"
    assert target.host == "public.test"
    assert fake_dns == ["public.test"]  # resolved exactly once


async def test_literal_ip_is_not_resolved(fake_dns: list[str]) -> None:
    target = await validate_url("http://93.184.215.14/", [])
    assert target.address == "93.184.215.14"
    assert fake_dns == []


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ftp://public.test/file", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://127.0.0.1:6379/_INFO", "only http and https"),
        ("javascript:alert(1)", "only http and https"),
        ("http://public.test@169.254.169.254/", "user name or password"),
        ("http://user:secret@public.test/", "user name or password"),
        ("http://public.test\\@127.0.0.1/", "user name or password"),
        ("http:///nohost", "no host"),
        ("http://0177.0.0.1/", "not a valid URL"),
    ],
)
async def test_shape_refusals(url: str, fragment: str, fake_dns: list[str]) -> None:
    message = await refusal(url)
    assert fragment in message
    assert "secret" not in message  # passwords never reach an error message (or history)
    assert fake_dns == []  # refused before any lookup


@pytest.mark.parametrize(
    ("allow", "url"),
    [
        (["wiki.intranet.test"], "http://wiki.intranet.test/page"),
        (["10.1.2.3"], "http://wiki.intranet.test/page"),
        (["10.0.0.0/8"], "http://wiki.intranet.test/page"),
        (["127.0.0.1"], "http://127.0.0.1:8000/"),
        (["127.0.0.1"], "http://2130706433/"),
        (["[::1]"], "http://[::1]/"),
        (["127.0.0.1"], "http://mapped.test/"),
    ],
)
async def test_allow_list_admits_named_hosts_and_addresses(allow: list[str], url: str) -> None:
    await validate_url(url, allow)


@pytest.mark.parametrize(
    ("allow", "url"),
    [
        (["127.0.0.1"], "http://127.0.0.2/"),
        (["intranet.test"], "http://wiki.intranet.test/"),  # names match exactly, no suffixes
        (["wiki.intranet.test"], "http://internal.test/"),
        (["10.1.2.3"], "http://metadata.test/"),
    ],
)
async def test_allow_list_admits_nothing_else(allow: list[str], url: str) -> None:
    assert "it resolves to" in await refusal(url, allow)


def test_allow_list_parsing() -> None:
    allow = AllowList.parse([" Wiki.Example. ", "10.0.0.0/8", "0x7f.1", "[::1]", ""])
    assert allow.names == {"wiki.example"}
    assert allow.allows_address(ipaddress.ip_address("10.9.9.9"))
    assert allow.allows_address(ipaddress.ip_address("127.0.0.1"))
    assert allow.allows_address(ipaddress.ip_address("::1"))
    assert not allow.allows_address(ipaddress.ip_address("127.0.0.2"))


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), False),
        (socket.gaierror(socket.EAI_AGAIN, "Temporary failure"), True),
    ],
)
async def test_resolution_failures(monkeypatch: pytest.MonkeyPatch, error: socket.gaierror, transient: bool) -> None:
    async def resolve(host: str, port: int) -> list[str]:
        raise error

    monkeypatch.setattr(url_guard, "resolve_host", resolve)
    with pytest.raises(HostNotFound) as caught:
        await validate_url("http://nowhere.test/", [])
    assert caught.value.transient is transient
    assert "nowhere.test" in str(caught.value)


async def test_real_resolver_reads_literals_without_dns() -> None:
    """The real ``resolve_host`` on a numeric host: getaddrinfo answers without a query."""
    assert await REAL_RESOLVE_HOST("127.0.0.1", 80) == ["127.0.0.1"]
