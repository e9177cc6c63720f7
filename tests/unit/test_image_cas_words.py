"""container/image_cas.py tells "no such path in the image" (the next bundle path is tried) from
an engine failure (refused, never cached as "the image trusts nothing"); the words are the
engines' own, copied from docker 20.10's and podman 4's `cp` on this machine."""

from __future__ import annotations

from sprawl_orch.container.image_cas import _absent


def test_absent_words_of_both_engines() -> None:
    assert _absent(
        "Error response from daemon: Could not find the file /etc/ssl/cert.pem in container 34"
    )
    assert _absent(
        'Error: "/etc/ssl/cert.pem" could not be found on container 31a4: no such file or directory'
    )


def test_a_symlink_loop_is_absence() -> None:
    assert _absent(
        "Error response from daemon: evalSymlinksInScope: too many links in "
        "/var/lib/docker/overlay2/1d/merged/etc/ssl/certs/ca-certificates.crt"
    )


def test_an_engine_failure_is_not_absence() -> None:
    assert not _absent("Cannot connect to the Docker daemon at unix:///run/docker.sock")
    assert not _absent("Error: permission denied")


def test_only_certificates_openssl_loads_are_kept() -> None:
    """A block of valid base64 that is no certificate made OpenSSL refuse the whole bundle
    (the run's CA written after it with it); it is left out, the real one kept."""
    import ssl

    import trustme

    from sprawl_orch.container.image_cas import certificates

    good = trustme.CA().cert_pem.bytes()
    broken = b"-----BEGIN CERTIFICATE-----\nAAAAAAAAAAAAAAAA\n-----END CERTIFICATE-----\n"
    with_broken = broken + good
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_verify_locations(cadata=with_broken.decode())
        refused = False
    except ssl.SSLError:
        refused = True
    assert refused  # what the image's text did to the whole bundle before
    kept = certificates(with_broken)
    assert kept == good.strip() + b"\n"
    ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=kept.decode())
