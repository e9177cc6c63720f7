"""Helpers for the guardian tests (not a test module): an orchestrator process to SIGKILL,
the guardian's log, and what the engines and the process table still hold."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

DRIVER = Path(__file__).with_name("guardian_driver.py")
MARK = "SPRAWL_CHAOS_MARK"
# The guardian's grace (3 s) + its removals + a loaded machine.
SETTLE_SECONDS = 20.0


class Orchestrator:
    """`guardian_driver.py` running ExecTool, its stdout lines readable as they come."""

    def __init__(self, spec: Mapping[str, Any], log: Path, env: Mapping[str, str] | None = None):
        self.spec = dict(spec)
        self.log = log
        environ = dict(os.environ)
        environ.update(env or {})
        environ["SPRAWL_GUARDIAN_LOG"] = str(log)
        # The shared guardian (guardian/server.py) leaves soon after its last caller.
        environ.setdefault("SPRAWL_GUARDIAN_IDLE", "1")
        environ[MARK] = str(spec["session"])
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), json.dumps(self.spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("")  # end of output

    def wait_line(self, prefix: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"no {prefix!r} from the driver in {timeout:g} s; "
                    f"saw {self.seen}; stderr: {self.stderr()}"
                )
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line == "":
                raise AssertionError(
                    f"the driver ended before {prefix!r}; saw {self.seen}; stderr: {self.stderr()}"
                )
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return "(still running)"
        return self.proc.stderr.read()[-3000:]

    def sigkill(self) -> float:
        """SIGKILL the orchestrator (only it: its children are orphaned, as in a real crash);
        return the monotonic time of the kill."""
        killed_at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return killed_at

    def finish(self, timeout: float = 120.0) -> None:
        self.proc.wait(timeout)


def guardian_events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    events = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))
    return events


def guardian_done(log: Path, timeout: float = SETTLE_SECONDS) -> dict[str, Any]:
    """The guardian's last word (`done`), waiting for it."""
    ok = wait_for(lambda: any(e["event"] == "done" for e in guardian_events(log)), timeout)
    assert ok, f"the guardian said no 'done' in {timeout:g} s: {guardian_events(log)}"
    return next(e for e in guardian_events(log) if e["event"] == "done")


def guardian_running(session: str, log: Path | None = None) -> bool:
    """A guardian of `session` still runs: its own process, or the shared guardian
    (`--serve`) writing to `log`."""
    for proc in psutil.process_iter(["cmdline", "status"]):
        argv = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "sprawl_orch.guardian" not in argv:
            continue
        if session in argv:
            return True
        if log is not None and "--serve" in argv:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{proc.pid}/fd/2") == str(log):
                    return True
    return False


def _of(event: dict[str, Any], session: str) -> bool:
    return event.get("session", session) == session  # the shared guardian names it


def guardian_outcome(log: Path, session: str, timeout: float = 60.0) -> dict[str, Any]:
    """The guardian's `done` for `session` once it has finished; {} when the session never
    reached a guardian. The client opens the log just before spawning the guardian, so no
    log means no guardian; a shared guardian says `ready` for each session it serves."""
    if not log.exists():
        return {}

    def finished() -> bool:
        return any(
            e["event"] == "done" and _of(e, session) for e in guardian_events(log)
        ) or not guardian_running(session, log)

    assert wait_for(finished, timeout, step=0.05), f"guardian still busy: {guardian_events(log)}"
    events = [e for e in guardian_events(log) if _of(e, session)]
    if not any(e["event"] == "ready" for e in events):
        return {}
    return next((e for e in events if e["event"] == "done"), {"missing": True})


def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def containers(engine: str, session: str, *, status: str | None = None) -> list[str]:
    """IDs of the session's containers in `engine` (any state unless `status`)."""
    argv = [
        engine,
        "ps",
        "--all",
        "--quiet",
        "--no-trunc",
        "--filter",
        f"label=sprawl.session={session}",
    ]
    if status:
        argv += ["--filter", f"status={status}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return done.stdout.split()


def sessions_left(engine: str, prefix: str) -> list[str]:
    """Names of containers whose sprawl.session label starts with `prefix`."""
    # podman 4.3's ps template has no .Label method ("can't evaluate field Label in type
    # containers.psReporter", once any container exists); docker's .Labels is a string.
    label = (
        '{{index .Labels "sprawl.session"}}'
        if engine == "podman"
        else '{{.Label "sprawl.session"}}'
    )
    done = subprocess.run(
        [engine, "ps", "--all", "--format", "{{.Names}} " + label],
        capture_output=True,
        text=True,
        check=True,
    )
    left = []
    for line in done.stdout.splitlines():
        name, _, label = line.partition(" ")
        if label.startswith(prefix):
            left.append(name)
    return left


def force_remove(engine: str, session: str) -> None:
    """Test cleanup only: whatever the guardian missed must not outlive the test."""
    ids = containers(engine, session)
    if ids:
        extra = ["-t", "0"] if engine == "podman" else []
        subprocess.run([engine, "rm", "-f", *extra, *ids], capture_output=True, check=False)


def marked_processes(mark_prefix: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose environment holds MARK=<prefix...>: every command,
    container process and engine CLI a driver started carries it."""
    found = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(MARK, "").startswith(mark_prefix):
                found.append(proc)
    return found


def persistent_copies(state: Path) -> list[bool]:
    """Each persistent copy slot under the state directory: whether a live command holds it."""
    from sprawl_orch.copy.store import CopyStore

    return [info.busy for info in CopyStore(state / "copies", 0).info()]


def scratch_copies(scratch: Path) -> list[str]:
    return sorted(p.name for p in scratch.iterdir()) if scratch.exists() else []


def slow_create_wrapper(
    bindir: Path, engine: str, mark: Path, seconds: float, log: Path | None = None
) -> Path:
    """A `docker`/`podman` first on PATH that, for a create of run `slow`, touches `mark`,
    sleeps `seconds`, then runs the real create and writes its output to `mark`.id -- a create
    still in flight at the engine when the orchestrator dies. With `log`, the sleep starts only
    once the guardian writing `log` has said `swept` (its first sweep is over): a create
    landing during that sweep's listing is found by it, not `late` (a slow guardian start under
    load made a 1 s create do that about one run in six)."""
    real = subprocess.run(
        ["sh", "-c", f"command -v {engine}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    bindir.mkdir(parents=True, exist_ok=True)
    wrapper = bindir / engine
    gate = (
        ""
        if log is None
        else (
            "  n=0\n"
            f'  until grep -q \'"event": "swept"\' "{log}" 2>/dev/null; do\n'
            "    n=$((n + 1)); [ $n -lt 2400 ] || break\n"  # 120 s: then the test says why
            "    sleep 0.05\n"
            "  done\n"
        )
    )
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = create ] && case " $* " in *" sprawl.run=slow "*) true;; *) false;; '
        "esac; then\n"
        f'  : > "{mark}"\n'
        f"{gate}"
        f"  sleep {seconds}\n"
        f'  out=$("{real}" "$@"); rc=$?\n'
        f'  printf "%s\\n" "$out" > "{mark}.id"\n'
        '  printf "%s\\n" "$out"; exit $rc\n'
        "fi\n"
        f'exec "{real}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def spec(
    session: str,
    arm: str,
    tmp: Path,
    commands: Sequence[Sequence[str]],
    *,
    image: str | None = None,
    run: str = "default",
    timeout: float = 600,
) -> dict[str, Any]:
    work = tmp / "work"
    work.mkdir(exist_ok=True)
    (work / "a.txt").write_text("a\n")
    (tmp / "scratch").mkdir(exist_ok=True)
    return {
        "session": session,
        "arm": arm,
        "workdir": str(work),
        "scratch": str(tmp / "scratch"),
        "state": str(tmp / "state"),
        "image": image,
        "commands": [list(c) for c in commands],
        "run": run,
        "timeout": timeout,
    }
