"""The egress attacks, run *inside* a sandbox that has an allow-list: each prints what
happened as JSON; `escaped` lists the ones that got out. The script is plain Python of the
standard library (the sandbox's own interpreter runs it)."""

from __future__ import annotations

import json

SCRIPT = r"""
import http.client, json, socket, sys
args = json.loads(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        out[name] = "ESCAPED: " + str(fn())
    except Exception as err:
        out[name] = "refused: " + type(err).__name__ + ": " + str(err)
def dns():
    return socket.getaddrinfo(args["name"], 443)
def tcp(address, port):
    def go():
        s = socket.create_connection((address, port), timeout=5)
        s.close()
        return "connected to %s:%s" % (address, port)
    return go
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", (args["resolver"], 53))
    s.settimeout(3)
    return s.recv(512)
def via_proxy(method, target, host):
    def go():
        c = http.client.HTTPConnection("127.0.0.1", args["proxy_port"], timeout=30)
        c.putrequest(method, target, skip_host=True)
        c.putheader("host", host)
        c.endheaders()
        status = c.getresponse().status
        if status >= 400:
            raise OSError("proxy answered %d" % status)
        return "proxy answered %d" % status
    return go
attempt("dns", dns)
for i, (address, port) in enumerate(args["tcp"]):
    attempt("tcp-%d %s:%s" % (i, address, port), tcp(address, port))
attempt("udp-dns", udp)
attempt("ip-literal", via_proxy("CONNECT", args["ip_target"], args["ip_target"]))
attempt("loopback-name", via_proxy("CONNECT", args["loopback_target"], args["loopback_target"]))
attempt("plain-unlisted-host", via_proxy("GET", args["plain_url"], "evil.example.org"))
print(json.dumps(out))
"""


def argv(python: str, **args: object) -> list[str]:
    return [python, "-c", SCRIPT, json.dumps(args)]


def escaped(stdout: str) -> dict[str, str]:
    said: dict[str, str] = json.loads(stdout.strip().splitlines()[-1])
    return {k: v for k, v in said.items() if not v.startswith("refused")}
