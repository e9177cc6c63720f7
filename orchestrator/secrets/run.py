"""One command's secrets: placeholders drawn for it, the values read from the caller, the
run's CA, and what the proxy did with them (the result's `network.secrets`)."""

from __future__ import annotations

import os
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sprawl_orch.secrets.ca import RunCA
from sprawl_orch.secrets.disguise import Disguise, Marked, disguises
from sprawl_orch.secrets.spec import Spec, placeholder
from sprawl_orch.secrets.swap import Bound, holds, swap_value

_contexts: dict[tuple[object, ...], ssl.SSLContext] = {}
_contexts_lock = threading.Lock()


def _stamp(path: str | None) -> tuple[int, ...]:
    """A file's or directory's identity and change time; () when it is not there."""
    if not path:
        return ()
    try:
        st = os.stat(path)
    except OSError:  # gone: create_default_context says so, as before the cache
        return ()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def trust_key(cafile: str | None) -> tuple[object, ...]:
    """What the upstream context's trust is made of. With no file named, OpenSSL's defaults:
    its CA file and hashed directory (SSL_CERT_FILE / SSL_CERT_DIR when set, read now, as
    load_default_certs reads them). The key was constant then, and a changed default store
    (a CA added to the directory, the variable pointed elsewhere) was never read again."""
    if cafile is not None:
        return ("file", cafile, _stamp(cafile))
    paths = ssl.get_default_verify_paths()
    return ("default", paths.cafile, _stamp(paths.cafile), paths.capath, _stamp(paths.capath))


def upstream_context(cafile: str | None) -> ssl.SSLContext:
    """One client context per trust store and process, not per command: loading the host's
    bundle (Debian's, ~140 CAs) took 30-200 ms, paid by the first intercepted connection of
    every command. Keyed by the trust inputs' identity and mtime (trust_key), so a store
    changed on disk is read again; a client SSLContext is shared safely between
    connections."""
    key = trust_key(cafile)
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = ssl.create_default_context(cafile=cafile)
            ctx.set_alpn_protocols(["http/1.1"])
            _contexts[key] = ctx
        return ctx


@dataclass
class SecretRun:
    specs: tuple[Spec, ...] = field(repr=False)
    upstream_cafile: str | None = None
    ca: RunCA = field(default_factory=RunCA)
    secrets: tuple[Bound, ...] = field(default=(), repr=False)
    _counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _leaks: list[dict[str, str]] = field(default_factory=list)
    _echoes: dict[str, int] = field(default_factory=dict)
    _sent: dict[bytes, bytes] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _upstream: ssl.SSLContext | None = None
    # Every form of every value -> its placeholder, what a response is scrubbed of; made once
    # (quoting and base64 per request were a share of the intercepted path's CPU).
    forms: dict[bytes, bytes] = field(default_factory=dict, repr=False)
    # The value escaped or inside base64, by pattern (disguise.py), compiled once per run.
    disguises: Sequence[Disguise] = field(default=(), repr=False)
    # Each placeholder so spelled too: one sent percent-encoded, in base64 or lower-cased
    # where it is never swapped went out uncounted (tests/secrets/test_attacks_forms.py).
    spellings: dict[bytes, list[Disguise]] = field(default_factory=dict, repr=False)
    # forms and every form sent so far, remade only when a new one is sent: copied per request
    # it was a share of the intercepted path's CPU. Never changed once handed out.
    _scrub: dict[bytes, bytes] | None = field(default=None, repr=False)
    # The shortest text any of a placeholder's spellings can be (carries skips shorter ones).
    _spelled_floor: dict[bytes, int] = field(default_factory=dict, repr=False)
    _floor: int = 0
    _marked: dict[bytes, tuple[bool, tuple[str, ...], tuple[str, ...]]] = field(
        default_factory=dict, repr=False
    )

    def __post_init__(self) -> None:
        self.secrets = tuple(
            Bound(
                name=s.name,
                placeholder=placeholder(s.name).encode(),
                value=s.value.encode(),
                header=s.header.lower().encode() if s.header else None,
                format=s.format,
                basic_user=s.basic_user.encode() if s.basic_user is not None else None,
            )
            for s in self.specs
        )
        self.forms = {f: b.placeholder for b in self.secrets for f in b.forms()}
        self.disguises = Marked(d for b in self.secrets for d in disguises(b.value, b.placeholder))
        self.spellings = {
            b.placeholder: disguises(b.placeholder, b.placeholder) for b in self.secrets
        }
        # Each placeholder's spellings' markers as text (check_bound, on every request: a
        # pattern per spelling over the head was ~5 us, Marked.none_in's `in` per bytes
        # marker ~2.2, these over the head decoded once ~0.8: process CPU per call, min of
        # 9 x 20 000, a 164-byte head, load ~4).
        self._marked = {}
        for ph, ways in self.spellings.items():
            marked = Marked(ways)
            self._marked[ph] = (
                marked.marked,
                tuple(m.decode("latin-1") for m in marked.plain),
                tuple(m.decode("latin-1") for m in marked.folded),
            )
        self._spelled_floor = {
            ph: min(d.shortest for d in ways) for ph, ways in self.spellings.items() if ways
        }
        # No text shorter than this holds any placeholder in any spelling (check_headers).
        self._floor = min(
            [len(b.placeholder) for b in self.secrets] + list(self._spelled_floor.values()),
            default=0,
        )

    def env(self) -> dict[str, str]:
        """What the command's environment gets: each name set to its placeholder."""
        return {b.name: b.placeholder.decode() for b in self.secrets}

    def bound_to(self, host: str, port: int) -> tuple[Bound, ...]:
        return tuple(
            b
            for b, s in zip(self.secrets, self.specs, strict=True)
            if not s.hosts.decide(host, port)
        )

    def wants(self, host: str, port: int) -> bool:
        return bool(self.bound_to(host, port))

    def upstream_context(self) -> ssl.SSLContext:
        """The real host verified against the host's trust store (the caller's SSL_CERT_FILE
        when it names one, as the host's Python would), HTTP/1.1 only."""
        if self._upstream is None:
            self._upstream = upstream_context(self.upstream_cafile)
        return self._upstream

    def check_plain(self, host: str, where: str, data: bytes, bound: tuple[Bound, ...]) -> None:
        """Count a placeholder seen where it is never swapped (a URL, a plain request)."""
        if len(data) < self._floor:
            # Shorter than every spelling of every placeholder (carries: a Basic blob decodes
            # shorter than itself): a URL's path like `/small` holds none, one len() instead
            # of a carries() per secret.
            return
        for secret in self.secrets:
            if self.carries(data, secret):
                self.leak(secret.name, host, f"{where} (never swapped)")

    def carries(self, data: bytes, secret: Bound) -> bool:
        """Whether `data` holds the secret's placeholder: plainly, in Basic credentials, or
        spelled otherwise (escaped, in base64, in another case)."""
        if holds(data, secret.placeholder):
            return True
        spelled = self.spellings.get(secret.placeholder, ())
        if not spelled or len(data) < self._spelled_floor[secret.placeholder]:
            # Shorter than any spelling (most URLs and header values): no pattern runs.
            return False
        lowered = data.lower()
        return any(d.found_in(data, lowered) for d in spelled)

    def check_headers(
        self,
        host: str,
        sent: list[tuple[bytes, bytes]],
        others: tuple[Bound, ...],
    ) -> None:
        """Count each placeholder a request's headers carry where it is never swapped: another
        secret's in a value, any in a name (a placeholder is a valid token: sent as a name it
        went out uncounted, tests/secrets/test_attacks_scrub.py)."""
        for key, value in sent if others else ():
            for other in others:
                if self.carries(value, other):
                    self.leak(other.name, host, f"header {key.decode('latin-1')}")
        # A name shorter than every spelling of every placeholder holds none (most names: one
        # len() each; searching a joined head cost 3-13 us of every request's path here).
        floor = self._floor
        for key in [k for k, _ in sent if len(k) >= floor]:
            for secret in self.secrets:
                if self.carries(key, secret):
                    self.leak(secret.name, host, "a header's name (never swapped)")

    def check_bound(
        self,
        host: str,
        sent: bytes,
        headers: list[tuple[bytes, bytes]],
        bound: tuple[Bound, ...],
        unsent: frozenset[bytes],
    ) -> None:
        """Count a bound secret's own placeholder left in a header sent to its host: only its
        plain spelling and a Basic blob are swapped; spelled otherwise (another case, escaped,
        in base64 without the Basic scheme) it went out uncounted, where the URL and the body
        count it (atkpass). `sent`, the head as written, is searched once for the spellings'
        markers (its values were swapped: the plain placeholder and a Basic blob holding it
        are not in them); each header only after a hit, so a hit in a name or the URL
        (counted there) is not counted again."""
        text = ""
        for secret in bound:
            marked, plain, folded = self._marked[secret.placeholder]
            if marked:
                # Marked.none_in, over text: a marker is ASCII, and latin-1's lower() folds
                # ASCII as bytes.lower() does (it folds more, which only lets more through).
                text = text or sent.decode("latin-1")
                if not _held(plain, text) and not (folded and _held(folded, text.lower())):
                    continue
            for key, value in headers:
                if key not in unsent and self.carries(swap_value(value, secret), secret):
                    self.leak(secret.name, host, f"header {key.decode('latin-1')}")

    def plain_request(self, host: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        """The proxy's plain-HTTP path: nothing is swapped there (the command could read it
        on the wire); a placeholder in it is counted as an attempted leak."""
        self.check_plain(host, "plain HTTP url", target, ())
        for key, value in headers:
            self.check_plain(host, f"plain HTTP header {key.decode('latin-1')}", value, ())
            self.check_plain(host, "plain HTTP header name", key, ())

    def sent_forms(self, new: dict[bytes, bytes]) -> dict[bytes, bytes]:
        """Every form of every value (`forms`) and every header form of a value sent so far in
        this run (-> what the command wrote; these win), `new` added: what any later response
        is scrubbed of. Shared between connections: the caller must not change it."""
        with self._lock:
            if self._scrub is None or any(self._sent.get(k) != v for k, v in new.items()):
                self._sent.update(new)
                self._scrub = {**self.forms, **self._sent}
            return self._scrub

    def injected(self, name: str, host: str) -> None:
        with self._lock:
            self._counts[(name, host)] = self._counts.get((name, host), 0) + 1

    def leak(self, name: str, host: str, where: str) -> None:
        with self._lock:
            self._leaks.append({"secret": name, "host": host, "where": where})

    def echoed(self, host: str) -> None:
        with self._lock:
            self._echoes[host] = self._echoes.get(host, 0) + 1

    def report(self) -> dict[str, Any]:
        """The result's `network.secrets` (names and hosts only, never a value)."""
        with self._lock:
            return {
                "injected": [
                    {"secret": n, "host": h, "requests": c}
                    for (n, h), c in sorted(self._counts.items())
                ],
                "attempted_leaks": list(self._leaks),
                "echoes_scrubbed": dict(self._echoes),
                "bindings": {s.name: list(s.host_list) for s in self.specs},
            }

    def sentence(self) -> str:
        leaks = len(self._leaks)
        text = (
            "Secrets: "
            + "; ".join(
                f"{n} injected into {c} request(s) to {h}"
                for (n, h), c in sorted(self._counts.items())
            )
            if self._counts
            else "Secrets: none injected"
        )
        return f"{text}; {leaks} attempted leak(s) of a placeholder (left unswapped)."


def _held(markers: tuple[str, ...], text: str) -> bool:
    """disguise.held over text (check_bound)."""
    for marker in markers:  # noqa: SIM110 (any() over a generator: a frame per call)
        if marker in text:
            return True
    return False
