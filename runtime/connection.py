"""The one place a Temporal client is built: Temporal's environment configuration plus our converter.

Every client (worker, CLI, replayer, any server) resolves its connection with
``temporalio.envconfig``, exactly as the ``temporal`` CLI does: ``TEMPORAL_ADDRESS``,
``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*``, and ``TEMPORAL_PROFILE`` with the
TOML file (``TEMPORAL_CONFIG_FILE``, default ``~/.config/temporalio/temporal.toml``). So one
profile serves our tools and Temporal's, and nothing here re-reads those variables by hand.

A failed connection is turned into one line that names the setting to fix (a wrong CA, a missing
client certificate, a rejected API key), because the SDK's own error is a nested Rust debug dump.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfigProfile, ClientConnectConfig, DataSource
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from config.settings import Settings
from runtime.converter import data_converter
from runtime.tracing import tracing_interceptors
from workflows.text.untrusted_text import encodes_as_utf8

DEFAULT_NAMESPACE = "default"

# How each TLS file is named in the environment and in a TOML profile, for error messages.
_CA = "TEMPORAL_TLS_SERVER_CA_CERT_PATH (tls.server_ca_cert_path)"
_CLIENT_CERT = ("TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH "
                "(tls.client_cert_path, tls.client_key_path)")
_API_KEY = "TEMPORAL_API_KEY (api_key)"


class TemporalConnectionError(Exception):
    """A connection setting is wrong or the server is unreachable; the message is one line naming the setting."""


@dataclass(frozen=True)
class Connection:
    """A resolved connection profile: where to connect and how, before any network traffic.

    Its repr leaves out the profile and the connect options, which hold the API key, so logging a
    connection cannot leak it.
    """

    address: str
    namespace: str
    profile: ClientConfigProfile
    connect_config: ClientConnectConfig
    # The operator named the address (TEMPORAL_ADDRESS or a profile's address): it is only ever
    # connected to. Otherwise it is the embedded default's (DEERFLOW_EMBEDDED_ADDRESS).
    configured: bool = True
    # Where the address and namespace came from, as ``starter.py config`` shows them: "environment",
    # "profile NAME" or "embedded dev server (DEERFLOW_EMBEDDED_ADDRESS)" / "default".
    address_source: str = "environment"
    namespace_source: str = "environment"

    def __repr__(self) -> str:
        return f"Connection(address={self.address!r}, namespace={self.namespace!r}, secured={self.secured})"

    @property
    def secured(self) -> bool:
        """TLS or an API key is configured: such an address is never the embedded dev server."""
        return bool(self.connect_config.get("tls")) or bool(self.profile.api_key)

    @property
    def plain_loopback(self) -> bool:
        """A loopback address with no TLS and no API key."""
        return is_loopback(self.address) and not self.secured

    @property
    def embedded(self) -> bool:
        """The embedded default: no address configured, no TLS, no API key. The only kind the front door
        may start itself; a configured address (a dropped ``kubectl port-forward`` to a cluster) that
        does not answer must fail, not be answered by a new, empty server."""
        return not self.configured and self.plain_loopback


def is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _one_line(text: str) -> str:
    """The first line of a multi-line message, plus its last line when that says more (TOML errors)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return text
    return lines[0] if len(lines) == 1 else f"{lines[0]}: {lines[-1]}"


def _tls_file_setting(profile: ClientConfigProfile, path: str | None) -> str:
    tls = profile.tls
    sources: list[tuple[DataSource | None, str]] = []
    if tls is not None:
        sources = [(tls.server_root_ca_cert, "TEMPORAL_TLS_SERVER_CA_CERT_PATH"),
                   (tls.client_cert, "TEMPORAL_TLS_CLIENT_CERT_PATH"),
                   (tls.client_private_key, "TEMPORAL_TLS_CLIENT_KEY_PATH")]
    for source, name in sources:
        if isinstance(source, Path) and path is not None and Path(path) == source:
            return name
    return "TEMPORAL_TLS_*_PATH"


def load_connection(settings: Settings, env: Mapping[str, str] | None = None) -> Connection:
    """Resolve the connection from the environment (or ``env``) and the TOML profile, reading TLS files;
    with no address there, the embedded dev server's (``settings``' ``DEERFLOW_EMBEDDED_ADDRESS``).

    Raises TemporalConnectionError for a missing config file or profile, a TOML error or an
    unreadable TLS file.
    """
    environ = os.environ if env is None else env
    # Only Temporal's own variables reach the SDK's reader: given the whole environment, it panicked on
    # any variable of bytes that are not UTF-8 (a traceback for every command), whatever its name.
    temporal = {name: value for name, value in environ.items() if name.startswith("TEMPORAL_")}
    for name, value in temporal.items():
        if not encodes_as_utf8(value):
            raise TemporalConnectionError(f"{name} holds bytes that are not UTF-8.")
    config_file = environ.get("TEMPORAL_CONFIG_FILE")
    if config_file and not Path(config_file).is_file():
        # envconfig silently ignores a missing file; a named one that is missing is a mistake.
        raise TemporalConnectionError(f"TEMPORAL_CONFIG_FILE names {config_file}, which is not a file.")
    try:
        profile = ClientConfigProfile.load(override_env_vars=temporal)
    except RuntimeError as error:  # the bridge's ConfigError: bad TOML, unknown TEMPORAL_PROFILE
        raise TemporalConnectionError(
            f"Temporal client configuration (TEMPORAL_CONFIG_FILE, TEMPORAL_PROFILE): {_one_line(str(error))}"
        ) from error
    try:
        connect_config = profile.to_client_connect_config()
    except OSError as error:
        setting = _tls_file_setting(profile, error.filename)
        raise TemporalConnectionError(f"Cannot read {setting} {error.filename}: {error.strerror}.") from error
    configured = bool(profile.address)
    address = profile.address if configured else settings.embedded_address
    in_profile = f"profile {environ.get('TEMPORAL_PROFILE') or 'default'}"

    def source(variable: str, value: str | None, otherwise: str) -> str:
        return "environment" if environ.get(variable) else in_profile if value else otherwise

    return Connection(address=address, namespace=profile.namespace or DEFAULT_NAMESPACE,
                      profile=profile, connect_config=connect_config, configured=configured,
                      address_source=source("TEMPORAL_ADDRESS", profile.address,
                                            "embedded dev server: DEERFLOW_EMBEDDED_ADDRESS"),
                      namespace_source=source("TEMPORAL_NAMESPACE", profile.namespace, "default"))


RESET_RETRY_SECONDS = 5.0  # how long a server that resets connections may still be starting


def _is_unreachable(message: str) -> bool:
    """Nothing answers yet (refused, unavailable): worth waiting for a server that is starting."""
    return any(sign in message for sign in ("ConnectionRefused", "tcp connect error", "code: Unavailable"))


def _is_reset(message: str) -> bool:
    """The connection was reset or closed at once: a dev server does this for a moment after opening
    its port, and a proxy or port-forward in front of a starting server closes cleanly instead, but
    so may a TLS endpoint given plaintext, which is why these are retried only briefly. A reset that
    arrives while the client is still writing its first request shows as a broken pipe, and one that
    closes the connection before the client's first request went out as hyper's "connection was not
    ready" (seen once in a quiet suite run, 2026-11-28)."""
    return any(sign in message for sign in ("ConnectionReset", "BrokenPipe", "connection closed",
                                            "connection was not ready"))


def describe_failure(connection: Connection, error: Exception, front_door: bool = True) -> str:
    """One line saying what failed and which setting to look at. Never contains the API key.

    Only a front door (the CLI, ``serve``) starts the embedded dev server, so only its line says
    how to get one; a worker is told what it can do: wait for the server, or be pointed elsewhere."""
    message = str(error)
    address = connection.address
    tls = connection.connect_config.get("tls")
    tls_files = tls if isinstance(tls, TLSConfig) else None
    if "InvalidCertificate(NotValidForName" in message:  # rustls: NotValidForName or NotValidForNameContext
        text = (f"The TLS certificate of {address} is not valid for that name: "
                "set TEMPORAL_TLS_SERVER_NAME (tls.server_name) to the name it was issued for.")
    elif "InvalidCertificate" in message:
        if tls_files is not None and tls_files.server_root_ca_cert:
            text = f"The TLS certificate of {address} is not signed by the CA in {_CA}."
        else:
            text = f"The TLS certificate of {address} is not trusted by the system roots: set {_CA}."
    elif "InvalidContentType" in message or "InvalidMessage" in message:
        text = f"{address} does not speak TLS: unset TEMPORAL_TLS and the TEMPORAL_TLS_* settings (tls.disabled)."
    elif any(sign in message for sign in ("400 Bad Request",  # nginx checks the certificate after the handshake
                                          "CertificateRequired", "BadCertificate", "AlertReceived(UnknownCA)")):
        if tls_files is not None and tls_files.client_cert:
            text = f"{address} rejected the client certificate in {_CLIENT_CERT}."
        else:
            text = f"{address} requires a client certificate (mutual TLS): set {_CLIENT_CERT}."
    elif "code: Unauthenticated" in message or "code: PermissionDenied" in message:
        if connection.profile.api_key:
            text = f"{address} rejected the API key in {_API_KEY}."
        else:
            text = f"{address} requires authentication: set {_API_KEY} or a client certificate ({_CLIENT_CERT})."
    elif "h2 protocol error" in message or "FRAME_SIZE_ERROR" in message:
        text = f"{address} expects TLS: set TEMPORAL_TLS=true (tls), and {_CA} for a private CA."
    elif not tls and _is_reset(message):
        # A TLS endpoint given plaintext either answers garbage (above) or just hangs up: which one
        # depends on timing, so both mean the same.
        text = (f"{address} closed the connection at once, as a TLS endpoint does with plaintext: "
                f"set TEMPORAL_TLS=true (tls), and {_CA} for a private CA.")
    elif _is_unreachable(message) and connection.configured and connection.plain_loopback:
        text = (f"No Temporal server answers at {address} (TEMPORAL_ADDRESS, address): check that the server, or "
                "the port-forward or tunnel to it, is running; " + (
                    "unset TEMPORAL_ADDRESS for the embedded dev server." if front_door else
                    "a worker starts no server of its own, so start it (or `starter.py serve`) first."))
    elif _is_unreachable(message):
        text = f"No Temporal server answers at {address} (TEMPORAL_ADDRESS, address)."
    else:
        text = f"Cannot connect to Temporal at {address}: {_one_line(message)}"
    api_key = connection.profile.api_key
    return text.replace(api_key, "***") if api_key else text


async def connect_when_ready(address: str, timeout: float = 30.0, **kwargs: Any) -> Client:
    """``Client.connect``, retried while nothing answers yet or the frontend is not healthy yet.

    ``temporal server start-dev`` opens its port before the frontend is ready (refusing, then
    resetting connections for a moment), and a worker may start before its server; retrying for
    ``timeout`` seconds (resets: ``RESET_RETRY_SECONDS``) turns those races into a short wait. Any
    other failure (TLS, authentication) is final and raised at once.
    """
    started = time.monotonic()
    while True:
        try:
            return await Client.connect(address, **kwargs)
        except RuntimeError as error:
            waited = time.monotonic() - started
            starting = _is_unreachable(str(error)) or (_is_reset(str(error)) and waited < RESET_RETRY_SECONDS)
            if not starting or waited > timeout:
                raise
            await asyncio.sleep(0.3)


async def connect(
    connection: Connection, settings: Settings, *, timeout: float = 30.0, runtime: Runtime | None = None,
    front_door: bool = True,
) -> Client:
    """A client for ``connection`` with the shared data converter, built from the entry point's ``settings``.

    The client carries the tracing interceptor when ``settings`` enable traces (runtime/tracing.py),
    so the workers built on it do too; ``runtime`` (the worker's, with its metrics endpoint:
    runtime/metrics.py) defaults to the SDK's.

    Waits up to ``timeout`` seconds for a server that does not answer yet; raises
    TemporalConnectionError with a one-line explanation otherwise.
    """
    options: dict[str, Any] = {key: value for key, value in connection.connect_config.items() if key != "target_host"}
    options["namespace"] = connection.namespace
    converter = data_converter(settings)
    options["interceptors"] = tracing_interceptors(settings)
    if runtime is not None:
        options["runtime"] = runtime
    try:
        return await connect_when_ready(connection.address, timeout, data_converter=converter, **options)
    except RuntimeError as error:
        raise TemporalConnectionError(describe_failure(connection, error, front_door)) from None
