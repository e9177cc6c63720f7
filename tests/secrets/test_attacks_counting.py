"""The request's counting runs after the request went upstream (intercept.py's `finally`): a
placeholder sent where it is never swapped is still counted when the request never ends,
cut by the command going away or by the proxy's own close in the middle of its body (the
session thread blocked in a read, returned by the shutdown). Held when tried (atkwire); kept
as the check that a later move of the counting does not lose these. Real proxy, raw TLS
upstream on 127.0.0.1 (tests/secrets/raw.py)."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import pytest

from tests.secrets.raw import raw_upstream
from tests.secrets.test_attacks import Rig, _echo


@pytest.mark.parametrize("end", ["command-gone", "proxy-closed"])
def test_a_request_cut_in_its_body_counts_its_url_and_header_leaks(
    tmp_path: Path, end: str
) -> None:
    with raw_upstream(_echo) as up:
        rig = Rig(up, tmp_path, others=("OTHER",))
        try:
            other = rig.run.env()["OTHER"]
            host = f"localhost:{up.port}"
            sock = socket.create_connection(("127.0.0.1", rig.port), timeout=60)
            sock.sendall(f"CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            reply = b""
            while b"\r\n\r\n" not in reply:
                reply += sock.recv(4096)
            assert b" 200" in reply.split(b"\r\n")[0], reply
            tls = ssl.create_default_context(cafile=str(rig.bundle)).wrap_socket(
                sock, server_hostname="localhost"
            )
            tls.sendall(
                f"POST /up?to={other} HTTP/1.1\r\nHost: {host}\r\nX-Other: {other}\r\n"
                "Content-Length: 100000\r\n\r\n".encode()
                + b"x" * 100
            )
            deadline = time.monotonic() + 60
            while not up.heads and time.monotonic() < deadline:  # the head went upstream
                time.sleep(0.01)
            assert up.heads, "the request never reached the upstream"
            if end == "command-gone":
                tls.close()
                rig.proxy.close()
            else:
                rig.proxy.close()
                tls.close()
        finally:
            rig.proxy.close()
    wheres = sorted(leak["where"] for leak in rig.run.report()["attempted_leaks"])
    assert wheres == ["header x-other", "url (never swapped)"], wheres
