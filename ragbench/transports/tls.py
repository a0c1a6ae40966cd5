"""TLS for the ``http``, ``asgi`` and ``grpc`` transports: a certificate made at start, TLS 1.3.

With ``tls = true`` a transport's :meth:`start` makes a fresh self-signed
certificate (:func:`make_certificate`: an EC P-256 key, valid for
``127.0.0.1``, ``::1`` and ``localhost``, for one day) in a private
temporary directory, hands the far side the paths of its certificate and key
in the configuration line, and trusts exactly that certificate on the near
side: verification stays on (hostname included), and a server presenting any
other certificate fails the handshake. Both ends require TLS 1.3
(:data:`MIN_VERSION`). :meth:`Certificate.remove` deletes the files when
the transport closes.

Needs ``cryptography`` (``pip install 'ragbench[tls]'``), imported only when
a certificate is made.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass

from ..errors import MissingDependencyError

__all__ = [
    "MIN_VERSION",
    "RECORD_OVERHEAD",
    "RECORD_PAYLOAD",
    "Certificate",
    "client_context",
    "make_certificate",
    "record_bytes",
    "server_context",
]

#: The lowest TLS version either end accepts.
MIN_VERSION = ssl.TLSVersion.TLSv1_3
#: Largest plaintext per TLS record (RFC 8446 §5.1).
RECORD_PAYLOAD = 16384
#: Bytes a TLS 1.3 record adds with an AEAD suite: 5-byte header, 1 inner content type, 16-byte tag.
RECORD_OVERHEAD = 5 + 1 + 16


@dataclass(frozen=True, slots=True)
class Certificate:
    """A self-signed certificate and its key, as PEM files in a private directory."""

    directory: str
    cert_path: str
    key_path: str
    cert_pem: bytes

    def remove(self) -> None:
        """Delete the files and their directory (idempotent)."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self.directory)


def make_certificate(hosts: tuple[str, ...] = ("127.0.0.1", "::1", "localhost")) -> Certificate:
    """A fresh EC P-256 self-signed certificate for ``hosts``, written to a new temp directory.

    The directory is mode 0700 and the key file 0600. Raises
    :class:`MissingDependencyError` without ``cryptography``.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise MissingDependencyError("cryptography", "tls") from None

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ragbench far side")])
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.timezone.utc)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    directory = tempfile.mkdtemp(prefix="ragbench-tls-")
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    try:
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key_pem)
        with open(cert_path, "wb") as f:
            f.write(cert_pem)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return Certificate(directory, cert_path, key_path, cert_pem)


def client_context(cert_pem: bytes, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """A client context trusting exactly ``cert_pem``; hostname checked; TLS 1.3 only."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=cert_pem.decode("ascii"))
    ctx.minimum_version = MIN_VERSION
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def server_context(cert_path: str, key_path: str, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """A server context presenting the certificate at ``cert_path``; TLS 1.3 only."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = MIN_VERSION
    ctx.load_cert_chain(cert_path, key_path)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def record_bytes(plaintext: int) -> int:
    """Bytes on the wire for ``plaintext`` application bytes sent in full TLS 1.3 records.

    A lower bound: a sender that writes in pieces makes more, smaller records.
    """
    if plaintext <= 0:
        return 0
    records = -(-plaintext // RECORD_PAYLOAD)
    return plaintext + records * RECORD_OVERHEAD
