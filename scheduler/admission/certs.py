"""A self-signed serving certificate for the webhook server, and for the secure metrics server,
when none is mounted.

kopf's own generator needs `certbuilder` and `oscrypto`, and oscrypto cannot read the version of
OpenSSL 3.0.10 and later; `cryptography` makes the same kind of certificate. The certificate is
its own CA (the webhook configuration's `caBundle` is the certificate itself), valid for the
given host names and IP addresses, for `VALIDITY`. A fresh key pair per process: nothing is kept.
`serving_context` turns certificate files into the server-side `ssl.SSLContext` aiohttp serves
with; `self_signed_context` makes a certificate and loads it, leaving no file behind.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
CA_FILE = "ca.crt"
"""File names in a certificate folder, as in a `kubernetes.io/tls` Secret (cert-manager adds
ca.crt)."""


@dataclass(frozen=True)
class CertFiles:
    """PEM files of the serving certificate; `ca` is None when the certificate is its own CA."""

    cert: Path
    key: Path
    ca: Path | None = None


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def self_signed(names: Iterable[str], folder: Path) -> CertFiles:
    """Write a self-signed CA-capable serving certificate for `names` (host names and IP
    addresses; unspecified addresses such as 0.0.0.0 are left out) and its key to `folder`
    (the key readable by this user only). The first name is the common name."""
    wanted = [n for n in dict.fromkeys(names) if n and n not in ("0.0.0.0", "::")]
    if not wanted:
        raise ValueError("a certificate needs at least one host name or address")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, wanted[0][:64])])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in wanted]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / CERT_FILE, folder / KEY_FILE
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return CertFiles(cert_path, key_path)


def mounted(folder: Path) -> CertFiles:
    """The certificate files of a mounted `kubernetes.io/tls` Secret in `folder`: tls.crt and
    tls.key, and ca.crt when present (else the certificate itself is the CA bundle). Raises
    `FileNotFoundError` naming the missing file."""
    cert, key, ca = folder / CERT_FILE, folder / KEY_FILE, folder / CA_FILE
    for path in (cert, key):
        if not path.is_file():
            raise FileNotFoundError(f"webhooks.certDir: {path} is missing")
    return CertFiles(cert, key, ca if ca.is_file() else None)


def temporary_folder() -> tempfile.TemporaryDirectory[str]:
    """A private folder (mode 0700) for generated certificate files, removed on cleanup."""
    return tempfile.TemporaryDirectory(prefix="gpu-scheduler-certs-")


def serving_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or later) serving the PEM chain `cert` with `key`;
    raises `OSError` or `ssl.SSLError` naming the problem when they cannot be loaded."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def self_signed_context(names: Iterable[str]) -> ssl.SSLContext:
    """`serving_context` of a fresh `self_signed` certificate for `names`; its files live only
    while it is loaded (the context keeps the key in memory)."""
    with temporary_folder() as folder:
        files = self_signed(names, Path(folder))
        return serving_context(files.cert, files.key)
