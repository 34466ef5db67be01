"""SSRF guard for the crawler: decide whether a URL may be fetched, and where to connect.

The crawler fetches URLs that a language model chose, often taken from pages an attacker wrote,
so every URL (and every redirect target) passes through :func:`validate_url` first. It refuses
non-http(s) schemes and URLs with user info, resolves the host once, and refuses the URL if
*any* address it resolves to is not public (loopback, RFC 1918, CGNAT, unique-local,
link-local incl. the 169.254.169.254 metadata service, multicast, reserved, unspecified).
Addresses hidden inside IPv6 (IPv4-mapped, 6to4, NAT64) are judged by the IPv4 inside them,
and legacy IPv4 spellings (``2130706433``, ``0x7f.1``, ``0177.1``) are read the way
``inet_aton`` and therefore the OS resolver read them.

The result names the validated address. The caller must connect to that address and not
resolve the name again: a second lookup is what DNS rebinding attacks answer differently.

Hosts or addresses listed in ``DEERFLOW_CRAWL_ALLOW_HOSTS`` skip the address check, so a
deployment can crawl an intranet wiki on purpose. Entries may be host names (exact match),
IP addresses or CIDR networks.

This module does no I/O except through :func:`resolve_host`, which tests replace.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import unquote

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_SCHEMES = frozenset({"http", "https"})
DEFAULT_PORTS = {"http": 80, "https": 443}

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_RFC1918 = tuple(ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Only these characters can make up an IPv4 literal in inet_aton's legacy forms; checking
# first keeps glibc's habit of ignoring anything after a space from mattering.
_LEGACY_IPV4 = re.compile(r"^[0-9a-fx.]+$", re.IGNORECASE)
_MAX_URL_IN_MESSAGE = 200


class UrlRefused(Exception):
    """The URL must not be fetched; the message says why, in words an agent can act on."""


class HostNotFound(Exception):
    """The host name did not resolve. ``transient`` is True for a temporary DNS failure."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class ValidatedTarget:
    """A URL that passed the guard, and the address the connection must go to."""

    url: httpx.URL  # as given, without user info; used for Host, SNI and joining redirects
    host: str  # normalised host name or IP literal
    port: int
    address: str  # the validated IP to connect to

    @property
    def connect_url(self) -> httpx.URL:
        """The URL with the host replaced by the validated IP, so nothing resolves it again."""
        return self.url.copy_with(host=self.address)

    @property
    def host_header(self) -> str:
        """What the server must see in ``Host``: the original host (and port if not default)."""
        return self.url.netloc.decode("ascii")


async def resolve_host(host: str, port: int) -> list[str]:
    """Resolve ``host`` to its IP addresses (in resolver order, without duplicates).

    Module level so tests can replace it and no test ever sends a real DNS query.
    """
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    addresses: list[str] = []
    for _family, _type, _proto, _canonname, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


def display_url(url: str | httpx.URL) -> str:
    """The URL for an error message: user info removed (it may hold a password), length capped."""
    text = str(url)
    try:
        parsed = httpx.URL(text)
        if parsed.userinfo:
            text = str(parsed.copy_with(username=None, password=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        text = re.sub(r"//[^/@]*@", "//", text)
    if len(text) > _MAX_URL_IN_MESSAGE:
        text = text[:_MAX_URL_IN_MESSAGE] + "..."
    return text


def _refuse(url: str | httpx.URL, reason: str) -> UrlRefused:
    return UrlRefused(f"Refused to crawl {display_url(url)}: {reason}")


def normalise_host(host: str) -> str:
    """Lower-case, without brackets, percent-escapes or a trailing dot (``Example.COM.``)."""
    return unquote(host).strip("[]").rstrip(".").lower()


def parse_ip_literal(host: str) -> IPAddress | None:
    """Read ``host`` as an IP address, including legacy IPv4 forms; None if it is a name.

    ``2130706433``, ``0x7f.1`` and ``0177.0.0.1`` all mean 127.0.0.1 to ``inet_aton`` and to
    the system resolver, so they must mean the same to the guard.
    """
    host = normalise_host(host)
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not _LEGACY_IPV4.match(host) or not any(ch.isdigit() for ch in host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a 6to4 or NAT64 address carries to the v4 internet, if any."""
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def forbidden_reason(address: IPAddress) -> str | None:
    """Why ``address`` must not be crawled (e.g. "a link-local address"), or None if public."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d is a.b.c.d on a dual-stack socket
            return forbidden_reason(address.ipv4_mapped)
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = forbidden_reason(embedded)
            if reason is not None:
                return reason
    checks: list[tuple[bool, str]] = [
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address in _CGNAT, "a shared (CGNAT) address"),
        (any(address in net for net in _RFC1918), "a private address"),
        (address in _UNIQUE_LOCAL, "a private (unique local) address"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "a site-local address"),
        (address.is_reserved, "a reserved address"),
        (address.is_private or not address.is_global, "a special-purpose (non-public) address"),
    ]
    return next((reason for hit, reason in checks if hit), None)


@dataclass(frozen=True)
class AllowList:
    """``DEERFLOW_CRAWL_ALLOW_HOSTS`` parsed once: host names, and IP networks (single IPs as /32)."""

    names: frozenset[str]
    networks: tuple[IPNetwork, ...]

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        names: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in entries:
            entry = normalise_host(entry.strip())
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                literal = parse_ip_literal(entry)
                if literal is not None:
                    networks.append(ipaddress.ip_network(literal))
                else:
                    names.add(entry)
        return cls(frozenset(names), tuple(networks))

    def allows_address(self, address: IPAddress) -> bool:
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        return any(c.version == net.version and c in net for c in candidates for net in self.networks)


def _check_shape(url: str) -> tuple[httpx.URL, str, int]:
    """Parse ``url`` and refuse what no address check can save: bad scheme, user info, no host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise _refuse(url, f"it is not a valid URL ({exc})") from None
    if parsed.scheme not in ALLOWED_SCHEMES:
        scheme = parsed.scheme or "(none)"
        raise _refuse(url, f"only http and https URLs can be crawled, not scheme '{scheme}'")
    if parsed.userinfo:
        # Also catches "http://trusted.example@169.254.169.254/" style tricks.
        raise _refuse(url, "URLs with a user name or password in them are not crawled")
    host = normalise_host(parsed.host)
    if not host:
        raise _refuse(url, "the URL has no host name")
    return parsed.copy_with(fragment=None), host, parsed.port or DEFAULT_PORTS[parsed.scheme]


async def _addresses_of(host: str, port: int) -> list[IPAddress]:
    """The addresses to judge: the literal itself, or everything the resolver returns."""
    literal = parse_ip_literal(host)
    if literal is not None:
        return [literal]
    try:
        resolved = await resolve_host(host, port)
    except socket.gaierror as exc:
        transient = exc.errno == socket.EAI_AGAIN
        raise HostNotFound(f"could not resolve host {host!r} ({exc.strerror})", transient=transient) from None
    except UnicodeError:
        raise HostNotFound(f"host name {host!r} is not valid", transient=False) from None
    addresses = [ipaddress.ip_address(a) for a in resolved]
    if not addresses:
        raise HostNotFound(f"host {host!r} has no addresses", transient=False)
    return addresses


async def validate_url(url: str, allow_hosts: Iterable[str] = ()) -> ValidatedTarget:
    """Check ``url`` and return where to connect; raise :class:`UrlRefused` if it is unsafe.

    Every resolved address must be public unless the host name or that address is
    allow-listed; one bad address is enough to refuse, because the OS might pick it.
    """
    parsed, host, port = _check_shape(url)
    allow = AllowList.parse(allow_hosts)
    addresses = await _addresses_of(host, port)
    if host not in allow.names:
        for address in addresses:
            reason = forbidden_reason(address)
            if reason is not None and not allow.allows_address(address):
                raise _refuse(url, f"it resolves to {address}, {reason}")
    return ValidatedTarget(url=parsed, host=host, port=port, address=str(addresses[0]))
