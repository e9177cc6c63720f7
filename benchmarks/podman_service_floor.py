"""The podman row's floor over podman's API service (issue 26), for benchmarks/cli_profile.py.

    . .ci/env && python benchmarks/podman_service_floor.py [--reps N]

(benchmarks/cli_profile.py prints the same rows after its own podman floor.)

Podman 4.3.1 has no daemon here; `podman system service --time 60 unix://<path>` serves the
libpod API (/v4.3.1/libpod/...) on a socket 0600 in a 0700 directory of ours, started per
run (~40-200 ms to its first /_ping answer) and stopped with it; should this script be
killed, the service ends itself after 60 s without a request (seen with --time 2: gone,
socket removed). Every connect and read has a timeout: a service that does not answer
raises, never hangs. Two calls that never end by themselves (seen, 5 s and 3 s timeouts):
an attach read as a plain response (200, raw-stream) streams until the container ends, so
start goes on another connection; a wait on a container not yet started blocks until it
ends.

What it measured, and why the rows are what they are (podman 4.3.1, conmon 2.1.6, runc):
- `POST /containers/{id}/wait` answers ~200-300 ms after the command ended (conditions
  stopped and exited, `interval=5ms` too): libpod's WaitForExit waits for conmon to exit
  (podman PR #16088 describes its 250 ms poll loop). The attach stream ends when the
  command's streams do; an inspect right after it reads "stopped" and the exit code (a
  command that closes its streams and runs on is caught by polling inspect until it is no
  longer "running", as here).
- OOMKilled: conmon writes its "oom" marker into its working directory and podman looks in
  the bundle (engines/podman.py). A container whose conmon the service starts (the API's
  init, attach or start) inherits the *service's* cwd: an OOM-killed command reads
  `OOMKilled: false` (seen: exit 137, false; the same container started by the CLI from its
  bundle: true; conmon issue #504, fixed by podman PR #21523's persist dir in podman 5).
  A CLI `podman init` run from the bundle keeps it: the row that keeps every
  guarantee is "cli create + cli init + api". The marker lands in the service's own
  (private) cwd instead, so a service that runs one container at a time can attribute it:
  the all-API row reads it there (a lease of one service per running call; not built in
  the exec server). Each run first OOM-kills one command per row and prints what each read.
- The all-API row's create is a libpod spec written after raw_run's argv (same limits,
  user, caps, no-new-privileges, network none, read-only, mounts, and the /run and
  /var/tmp tmpfs the CLI's --read-only-tmpfs adds). container/verify.py's verify passes on
  its inspect as on the CLI's; what else differs in the inspect: no sdNotifyMode, no
  cri-o TTY annotation, the order of Env and bind options. The real argv (userns, seccomp,
  env file, tty, entrypoint, gVisor) is not translated: the row prices the create step, it
  proves no equivalence.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cli_oneshot import raw_run
from sprawl_orch.engines.podman import unmount_shm
from sprawl_orch.images.build import build_busybox

API = "/v4.3.1/libpod"
TIMEOUT = 30.0  # every connect and read: a service that does not answer raises
Steps = dict[str, float]


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = TIMEOUT) -> None:
        super().__init__("podman", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def call(conn: UnixConnection, method: str, url: str, body: object = None) -> Any:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    data = json.dumps(body).encode() if body is not None else None
    conn.request(method, API + url, body=data, headers=headers)
    answer = conn.getresponse()
    raw = answer.read()
    if answer.status not in (200, 201, 204):
        raise RuntimeError(f"{method} {url}: {answer.status} {raw[:300]!r}")
    return json.loads(raw) if raw else None


class Service:
    """One `podman system service` on a socket in a private directory; ended by stop()."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sprawl-podman-svc-")  # 0700
        self.path = os.path.join(self.dir, "podman.sock")
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            ["podman", "system", "service", "--time", "60", f"unix://{self.path}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.dir,
        )
        deadline = time.monotonic() + 20
        while not self._answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("podman system service did not answer in 20 s")
            time.sleep(0.005)
        self.start_seconds = time.perf_counter() - started
        self.conn = UnixConnection(self.path)

    def _answers(self) -> bool:
        try:
            conn = UnixConnection(self.path, timeout=2.0)
            conn.request("GET", "/_ping")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    def attach(self, cid: str) -> tuple[socket.socket, bytes]:
        """The hijacked attach stream: a raw socket once the 101/200 header is read."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT)
        sock.connect(self.path)
        sock.sendall(
            f"POST {API}/containers/{cid}/attach?stream=true&stdout=true&stderr=true HTTP/1.1"
            "\r\nHost: podman\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n"
            "Content-Length: 0\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise RuntimeError(f"attach closed: {head[:200]!r}")
            head += chunk
        if not any(code in head.split(b"\r\n", 1)[0] for code in (b" 101 ", b" 200 ")):
            raise RuntimeError(f"attach: {head[:300]!r}")
        return sock, head.split(b"\r\n\r\n", 1)[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


def api_spec(image: str, tree: Path, command: list[str], memory: int) -> dict[str, Any]:
    """A libpod create spec written after container/argv.py's create argv (raw_run's values,
    and the /run and /var/tmp tmpfs the CLI's --read-only-tmpfs adds): prices the API
    create, proves no equivalence."""
    where = str(tree)
    podman_tmpfs = ["rw", "rprivate", "nosuid", "nodev", "tmpcopyup"]
    limit = {"type": "nofile", "soft": 1024, "hard": 1024}
    return {
        "image": image,
        "command": command,
        "user": "65534:65534",
        "work_dir": where,
        "read_only_filesystem": True,
        "no_new_privileges": True,
        "cap_drop": ["ALL"],
        "netns": {"nsmode": "none"},
        "ipcns": {"nsmode": "private"},
        "log_configuration": {"driver": "none"},
        "oci_runtime": "runc",
        "resource_limits": {
            "memory": {"limit": memory, "swap": memory},
            "cpu": {"shares": 512, "quota": 100000, "period": 100000},
            "pids": {"limit": 256},
        },
        "r_limits": [limit, {**limit, "type": "nproc"}],
        "mounts": [
            {"destination": where, "source": where, "type": "bind", "options": ["rbind"]},
            {"destination": "/tmp", "source": "tmpfs", "type": "tmpfs", "options": ["mode=1777"]},
            *(
                {"destination": d, "source": "tmpfs", "type": "tmpfs", "options": podman_tmpfs}
                for d in ("/run", "/var/tmp")
            ),
        ],
    }


def service_floor(service: Service, create: list[str], spec: dict[str, Any], how: str) -> Steps:
    """One command through the service, each step timed; `create` is the CLI's create argv,
    `spec` the same as a libpod spec. how: "cli-init" (cli create, cli init from the bundle,
    the rest over the API: every guarantee), "api" (cli create, the rest over the API:
    OOMKilled lost), "api-create" (all over the API, OOMKilled read from the service's own
    marker: this service runs one container at a time; the create not proven equivalent)."""
    steps: Steps = {}
    mark = first = time.perf_counter()

    def lap(key: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        steps[key] = now - mark
        mark = now

    conn = service.conn
    if how == "api-create":
        cid = call(conn, "POST", "/containers/create", spec)["Id"]
        lap("api create")
    else:
        done = subprocess.run(create, capture_output=True, text=True, check=True)
        cid = done.stdout.strip().splitlines()[-1]
        lap("cli create")
    bundle = call(conn, "GET", f"/containers/{cid}/json")["StaticDir"]
    lap("api inspect (verify)")
    if how == "cli-init":
        subprocess.run(["podman", "init", cid], capture_output=True, check=True, cwd=bundle)
        lap("cli init (from the bundle)")
    sock, _early = service.attach(cid)  # the output of `true`: none
    lap("api attach")
    call(conn, "POST", f"/containers/{cid}/start")
    lap("api start")
    while sock.recv(1 << 16):
        pass
    sock.close()
    lap("attach to EOF")
    pause = 0.002
    while (state := call(conn, "GET", f"/containers/{cid}/json")["State"])["Status"] == "running":
        time.sleep(pause)  # the command closed its streams and runs on
        pause = min(pause * 2, 0.1)
    marker = Path(service.dir) / "oom"  # conmon's, when the service started it
    oom = bool(state["OOMKilled"]) or (how == "api-create" and marker.exists())
    marker.unlink(missing_ok=True)
    lap("api inspect (exit code, OOMKilled)")
    unmount_shm(bundle)  # as PodmanEngine.remove: rm's shm race (engines/podman.py)
    call(conn, "DELETE", f"/containers/{cid}?force=true")
    lap("api rm")
    steps["TOTAL"] = time.perf_counter() - first
    steps["_exit"] = float(state["ExitCode"])
    steps["_oom"] = float(oom)
    return steps


def podman_floor(image: str, tree: Path) -> float:
    """The CLI's floor: create, inspect, `start --attach`, inspect, rm (five podman runs)."""
    argv = raw_run("podman", image, tree, "runc")
    create = ["podman", "create", *argv[3:]]
    started = time.perf_counter()
    cid = subprocess.run(create, capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run(["podman", "container", "inspect", cid], capture_output=True, check=True)
    subprocess.run(["podman", "start", "--attach", cid], capture_output=True, check=True)
    subprocess.run(["podman", "container", "inspect", cid], capture_output=True, check=True)
    subprocess.run(["podman", "rm", "-f", cid], capture_output=True, check=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    reps = parser.parse_args().reps
    image = build_busybox("podman")
    with tempfile.TemporaryDirectory(prefix="sprawl-bench-profile-") as tmp:
        small = Path(tmp)
        (small / "a.txt").write_text("a\n")
        podman_service_rows(image, small, raw_run("podman", image, small, "runc"), reps)
    return 0


def wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - started


def podman_service_rows(image: str, tree: Path, raw: list[str], reps: int) -> None:
    """Side by side in one loop: `podman run --rm`, the CLI floor (five CLI calls), the
    three service rows, `python -c pass`; medians, ratios to `run --rm`, and each service
    row's steps. The client's start is counted as 1.8x `python -c pass` (cli_oneshot)."""
    create = ["podman", "create", *raw[3:]]
    spec = api_spec(image, tree, ["true"], int(raw[raw.index("--memory") + 1]))
    # the same, OOM-killed: 32 MiB, `tail /dev/zero` (it reads on until the kernel kills it)
    small = [*raw[3:-1], "sh", "-c", "tail /dev/zero"]
    for flag in ("--memory", "--memory-swap"):
        small[small.index(flag) + 1] = str(32 << 20)
    oom_spec = api_spec(image, tree, ["sh", "-c", "tail /dev/zero"], 32 << 20)
    service = Service()
    starts = [service.start_seconds]
    hows = ("cli-init", "api", "api-create")
    runs: dict[str, list[float]] = {k: [] for k in ("run --rm", "cli x5", *hows, "python")}
    steps: dict[str, list[Steps]] = {how: [] for how in hows}
    oom_read: dict[str, bool] = {}
    try:
        for how in hows:  # what each row reads of an OOM kill; then one `true`, not counted
            oom_read[how] = (
                service_floor(service, ["podman", "create", *small], oom_spec, how)["_oom"] == 1.0
            )
            service_floor(service, create, spec, how)
        for _ in range(reps):
            runs["run --rm"].append(wall(raw))
            runs["cli x5"].append(podman_floor(image, tree))
            for how in hows:
                took = service_floor(service, create, spec, how)
                if took["_exit"] != 0:
                    raise SystemExit(f"the {how} row's `true` ended {took['_exit']}")
                steps[how].append(took)
                runs[how].append(took["TOTAL"])
            runs["python"].append(wall([sys.executable, "-c", "pass"]))
    finally:
        service.stop()
    for _ in range(3):
        again = Service()
        starts.append(again.start_seconds)
        again.stop()
    base = statistics.median(runs["run --rm"])
    client = 1.8 * statistics.median(runs["python"])
    names = {
        "run --rm": "podman run --rm (the raw mechanism)",
        "cli x5": "floor: cli create, inspect, start --attach, inspect, rm",
        "cli-init": "floor: cli create + cli init + api (every guarantee)",
        "api": "api after cli create (OOMKilled lost)",
        "api-create": "all api, OOMKilled by marker (create unproven)",
        "python": "python -c pass",
    }
    print(f"\npodman over its API service, load {os.getloadavg()[0]:.1f}, medians of {reps}")
    print(f"  service start to first answer: {', '.join(f'{s * 1000:.0f}' for s in starts)} ms")
    for key, values in runs.items():
        took = statistics.median(values)
        print(
            f"  {names[key]:56} {took * 1000:6.0f}ms {took / base:5.2f}x"
            f"  +client start {(took + client) / base:5.2f}x"
        )
    print(f"  (issue 26's bound: <= 1.10x with the client start, {client * 1000:.0f} ms)")
    print(f"  an OOM-killed command, OOMKilled read: {oom_read}")
    for how in hows:
        keys = [k for k in steps[how][0] if not k.startswith("_")]
        parts = ", ".join(
            f"{k} {statistics.median(s[k] for s in steps[how]) * 1000:.0f}" for k in keys
        )
        print(f"  {how}: {parts} (ms)")


if __name__ == "__main__":
    sys.exit(main())
