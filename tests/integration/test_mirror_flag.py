"""`image build debian --mirror URL` takes that mirror over the one apt's sources name (issue
27, item 17), through the real CLI and the real debootstrap: a local HTTP server that records
what it is asked for and answers 404 gets debootstrap's first request, and the refusal names
that mirror, not apt's."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlparse

from sprawl_orch.images.apt_sources import debian_mirror
from tests.integration.conftest import missing

CLI = [str(Path(sys.executable).with_name("sprawl-orch"))]


class _Recorder(BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Recorder.asked.append(self.path)
        self.send_error(404)

    do_HEAD = do_GET

    def log_message(self, *args: object) -> None:
        pass  # the test reads `asked`, not a log on stderr


def test_the_mirror_flag_overrides_apts_mirror(docker_image: str) -> None:
    if shutil.which("debootstrap") is None:
        missing("debootstrap is not installed (apt-get install debootstrap)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mirror = f"http://127.0.0.1:{server.server_address[1]}/debian"
    try:
        done = subprocess.run(
            [*CLI, "image", "build", "debian", "--engine", "docker", "--mirror", mirror],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 125, done.stdout + done.stderr
    assert any(p.startswith("/debian/dists/bookworm/") for p in _Recorder.asked), _Recorder.asked
    assert mirror in done.stderr, done.stderr
    apt = urlparse(debian_mirror("bookworm") or "").hostname
    assert not apt or apt not in done.stderr, done.stderr
