"""A TLS-terminating gRPC proxy (Debian's nginx) in front of a dev server, for connection tests.

Temporal Cloud and production clusters are reached over TLS, mutual TLS or with an API key; the
dev server speaks only plaintext. nginx in front of it turns loopback into each of those, so the
real clients (worker, CLI, SDK) are tested against real handshakes rather than mocks.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from offline.model_server import FakeModelServer
from tests.support.processes import free_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _issue(directory: Path, name: str, *, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
           server: bool = False) -> tuple[CertPair, x509.Name, ec.EllipticCurvePrivateKey]:
    """A P-256 certificate: a self-signed CA when ``issuer`` is None, else a leaf signed by it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    signer_name, signer_key = issuer or (subject, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(signer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1)))
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(signer_key, hashes.SHA256())
    pair = CertPair(directory / f"{name}.pem", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair, subject, key


@dataclass(frozen=True)
class Pki:
    ca: CertPair
    server: CertPair
    client: CertPair
    other_ca: CertPair  # trusted by nobody: the "wrong CA"


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_name, ca_key = _issue(directory, "ca", issuer=None)
    server, _, _ = _issue(directory, "server", issuer=(ca_name, ca_key), server=True)
    client, _, _ = _issue(directory, "client", issuer=(ca_name, ca_key))
    other_ca, _, _ = _issue(directory, "other-ca", issuer=None)
    return Pki(ca=ca, server=server, client=client, other_ca=other_ca)


def serve_over_tls(server: FakeModelServer, pair: CertPair) -> str:
    """``server`` (not started yet) answers over TLS with ``pair``'s certificate; its ``https`` base URL."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pair.cert, pair.key)
    server._httpd.socket = context.wrap_socket(server._httpd.socket, server_side=True)
    return server.base_url.replace("http://", "https://")


class NginxGrpcProxy:
    """nginx terminating TLS on a free loopback port and passing gRPC to ``upstream`` in plaintext.

    ``client_ca`` turns on mutual TLS (a client certificate signed by it is required);
    ``api_key`` requires ``authorization: Bearer <api_key>`` and answers UNAUTHENTICATED otherwise,
    as Temporal Cloud does.
    """

    def __init__(self, directory: Path, upstream: str, server: CertPair, *, client_ca: Path | None = None,
                 api_key: str | None = None) -> None:
        if NGINX is None:
            raise RuntimeError("nginx is not installed")
        self.directory = directory
        self.port = free_port()
        self.error_log = directory / "error.log"
        directory.mkdir(parents=True, exist_ok=True)
        mtls = f"ssl_client_certificate {client_ca}; ssl_verify_client on;" if client_ca else ""
        auth = (f'if ($http_authorization != "Bearer {api_key}") {{ add_header grpc-status 16 always; '
                f'add_header grpc-message "invalid API key" always; return 204; }}'
                if api_key else "")
        temp = " ".join(f"{kind}_temp_path {directory / kind};" for kind in ("client_body", "proxy", "fastcgi",
                                                                             "uwsgi", "scgi"))
        (directory / "nginx.conf").write_text(f"""
daemon off;
worker_processes 1;
pid {directory / 'nginx.pid'};
error_log {self.error_log} info;
events {{ worker_connections 256; }}
http {{
    access_log off;
    {temp}
    server {{
        listen 127.0.0.1:{self.port} ssl http2;
        ssl_certificate {server.cert};
        ssl_certificate_key {server.key};
        {mtls}
        location / {{
            default_type application/grpc;
            {auth}
            grpc_read_timeout 300s;
            grpc_send_timeout 300s;
            grpc_pass grpc://{upstream};
        }}
    }}
}}
""")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> NginxGrpcProxy:
        assert NGINX is not None
        self.process = subprocess.Popen(
            [NGINX, "-p", str(self.directory), "-c", str(self.directory / "nginx.conf"), "-e", str(self.error_log)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 15
        while not _listening(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"nginx did not start: {self.error_log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=15)
        self.process = None
