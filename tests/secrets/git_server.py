"""A git smart-HTTP server over TLS on 127.0.0.1 that demands Basic credentials: stdlib's HTTP
server in front of git's own `git http-backend` (CGI), a bare repository with one commit. What
reached it is kept (the Authorization headers), as host-side evidence."""

from __future__ import annotations

import base64
import contextlib
import http.server
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trustme


@dataclass
class GitServer:
    port: int
    user: str
    password: str
    seen: list[str | None] = field(default_factory=list)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _cgi(self) -> None:
        server: GitServer = self.server.git  # type: ignore[attr-defined]
        root: Path = self.server.root  # type: ignore[attr-defined]
        auth = self.headers.get("authorization")
        server.seen.append(auth)
        want = base64.b64encode(f"{server.user}:{server.password}".encode()).decode()
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if auth != f"Basic {want}":
            self.send_response(401)
            self.send_header("www-authenticate", 'Basic realm="git"')
            self.send_header("content-length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("content-type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": server.user,
        }
        done = subprocess.run(
            ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.split(b"\r\n"):
            key, _, value = line.decode().partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _cgi
    do_POST = _cgi

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def git_server(ca: trustme.CA, where: Path, user: str, password: str) -> Iterator[GitServer]:
    """`where`/repo.git: a bare repository holding one commit with README."""
    work = where / "seed"
    work.mkdir()
    quiet = {"capture_output": True, "check": True}
    subprocess.run(["git", "init", "-q", str(work)], **quiet)  # type: ignore[call-overload]
    (work / "README").write_text("served through the proxy\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "-C", str(work), "add", "README"], **quiet)  # type: ignore[call-overload]
    subprocess.run(["git", "-C", str(work), *ident, "commit", "-qm", "seed"], **quiet)  # type: ignore[call-overload]
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(where / "repo.git")], **quiet)  # type: ignore[call-overload]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    git = GitServer(port=server.server_address[1], user=user, password=password)
    server.git = git  # type: ignore[attr-defined]
    server.root = where  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield git
    finally:
        server.shutdown()
        server.server_close()
