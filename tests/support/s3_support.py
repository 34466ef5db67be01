"""A loopback S3 (moto's server) and an AWS environment that can only reach it.

botocore reads its credentials from the environment, the shared files and, failing those, the EC2
instance metadata address: every S3 test runs with the real variables cleared, the metadata service
disabled and name resolution and connections refused for anything but loopback, so nothing leaves 127.0.0.1 and no
developer's real credentials are ever used.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.support.processes import free_port

AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ROLE_ARN",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 (and IAM/STS) on 127.0.0.1 at a free port: the only AWS these tests talk to.

    moto keeps its backends in the process, shared by every server it starts: without the reset a
    module's users, buckets and keys would still be there for the next module's server (two modules
    creating the same IAM user failed on whichever ran second).
    """
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        httpx.post(f"{url}/moto-api/reset").raise_for_status()
        yield url
    finally:
        server.stop()


def is_loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host in (None, "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host)).is_loopback
    except ValueError:
        return False


def aws_only_on_loopback(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, **values: str) -> list[str]:
    """Clear the AWS environment, set ``values``, and refuse (and record) any non-loopback lookup or connection.

    Returns the list the refused hosts are appended to: a test asserts it stays empty.
    """
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    refused: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def loopback_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_loopback(host):
            refused.append(str(host))
            raise socket.gaierror(socket.EAI_NONAME, f"tests resolve loopback only, not {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def checked(address: Any) -> None:
        # IP literals (the metadata address 169.254.169.254) skip name resolution in aiohttp.
        host = address[0] if isinstance(address, tuple) else None
        if isinstance(address, tuple) and not is_loopback(host):
            refused.append(str(host))
            raise ConnectionRefusedError(f"tests connect to loopback only, not {host!r}")

    def loopback_connect(sock: socket.socket, address: Any) -> None:
        checked(address)
        real_connect(sock, address)

    def loopback_connect_ex(sock: socket.socket, address: Any) -> int:
        checked(address)
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", loopback_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", loopback_connect_ex)
    assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"
    return refused
