"""The per-run CA: made in memory for one command, its private key never written anywhere (not
to the state directory, not to the sandbox); leaf certificates per intercepted host, their
keys handed to the ssl module through a memfd (load_cert_chain takes only paths)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import threading

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# A run lasts at most hours; a day both sides of now covers clock skew inside the sandbox.
_VALID = datetime.timedelta(days=1)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


class RunCA:
    """One command's CA. `pem` is its certificate (public, goes into the sandbox's bundle);
    `server_context(host)` an ssl server context presenting a leaf for `host`."""

    def __init__(self, label: str = "sprawl-orch per-run CA") -> None:
        # P-256: key generation and signing in well under a millisecond (RSA-2048 keygen is
        # ~50 ms, paid per command).
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        public = self._key.public_key()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(label))
            .issuer_name(_name(label))
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _VALID)
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def leaf(self, host: str) -> tuple[bytes, bytes]:
        """(certificate PEM + CA PEM, key PEM) for `host` (a name or an IP literal)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(host))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _VALID)
            .not_valid_after(now + _VALID)
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM) + self.pem, key_pem

    def server_context(self, host: str) -> ssl.SSLContext:
        """The TLS server side for `host`, made once per run and host. ALPN offers only
        http/1.1: the interception speaks HTTP/1.1 (wire.py, llhttp), and a client offering h2 as
        well falls back to it (curl, Python, git, pip all do)."""
        with self._lock:
            ctx = self._contexts.get(host)
            if ctx is not None:
                return ctx
            chain, key = self.leaf(host)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.set_alpn_protocols(["http/1.1"])
            _load(ctx, chain, key)
            self._contexts[host] = ctx
            return ctx


def _load(ctx: ssl.SSLContext, chain: bytes, key: bytes) -> None:
    """load_cert_chain reads paths only: memfds, so the leaf's key never touches a disk and
    no other process (none shares our fd table) can open it by name."""
    fds = []
    try:
        for label, data in (("sprawl-leaf", chain), ("sprawl-leaf-key", key)):
            fd = os.memfd_create(label, os.MFD_CLOEXEC)
            fds.append(fd)
            os.write(fd, data)
        ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
    finally:
        for fd in fds:
            os.close(fd)
