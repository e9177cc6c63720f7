"""One escape probe, how it is judged, and how probes become the commands of one arm's run.

A probe is a shell function (POSIX sh + busybox applets; a Python helper where busybox has
no applet and a Python is there) that tries to get out one way, and prints
`ESC <id> <what>` when it did or `NOT <id> <why>` when it didn't. Wherever the host can
see the effect itself (a listener that got a message, a file that appeared, a sleeper that
died, a daemon that survived) the host's evidence decides, not the probe's word: escaped =
the host saw it OR the probe said ESC.

Steps of one arm's run, in order (each a command through sprawl-orch):
  plant    plants links/nodes in the copy for the next command (planted-by-a-first-command)
  battery  every other probe, one after the other, in one command
  exhaust  memory/pids/tmpfs exhaustion, alone: the limit may kill the whole command

`@NAME@` in a probe's text is replaced by the bait's value NAME (bait.py); a probe whose
value is absent on this machine (no systemd, no block device under /) is `n/a`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sprawl_orch.core.assurances import Guarantee
from tests.escapes.bait import Bait
from tests.escapes.snippets import ALL as PY_SNIPPETS

Step = Literal["plant", "battery", "exhaust"]
Judge = Callable[[Bait, str], str | None]  # host evidence of an escape, or None


@dataclass(frozen=True)
class Probe:
    id: str
    cls: str
    axis: Guarantee | None  # None: no axis claims it (reported, never fails a claim)
    sh: str
    judge: Judge | None = None
    plant: str = ""  # run in the plant step, before the battery
    step: Step = "battery"
    # The orchestrator itself closes this way out for every arm, `where: host` included
    # (no inherited fds, /dev/null as stdin): the raw control proves the probe detects it.
    orchestrator_closes: bool = False

    def needs(self) -> set[str]:
        return set(re.findall(r"@([A-Z0-9_]+)@", self.sh + self.plant))


@dataclass(frozen=True)
class Verdict:
    probe: Probe
    status: Literal["escaped", "blocked", "broken", "n/a"]
    evidence: str


PRELUDE = """
b=busybox
export b
py=@PY@
if [ -n "$py" ] && ! "$py" -c 1 2>/dev/null; then py=; fi
capeff() { $b sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status; }
hascap() { c=$(capeff); [ -n "$c" ] && [ $(( (0x$c >> $1) & 1 )) = 1 ]; }
hostmnt() { [ "$($b readlink /proc/self/ns/mnt)" = "@HOSTMNT@" ]; }
"""


def fill(text: str, values: dict[str, str]) -> str:
    return re.sub(r"@([A-Z0-9_]+)@", lambda m: values[m.group(1)], text)


def applicable(probe: Probe, values: dict[str, str]) -> bool:
    return probe.needs() <= values.keys()


def script(probes: list[Probe], step: Step, values: dict[str, str]) -> str:
    """One sh script running every applicable probe of `step` in order, each in a
    subshell so that one probe's failure (or `exit`) does not stop the others."""
    parts = [fill(PRELUDE, values)]
    for name, code in PY_SNIPPETS.items():
        parts.append(f"{name}='{code}'")
    for p in probes:
        if not applicable(p, values):
            continue
        body = p.plant if step == "plant" else (p.sh if p.step == step else "")
        if not body:
            continue
        # No pipe after the subshell: a daemon a probe starts would hold it open.
        parts.append(f"echo TRY {p.id}\nid={p.id}\n( echo RAN $id\n{fill(body, values)}\n) 2>&1")
    parts.append("echo DONE")
    return "\n".join(parts) + "\n"


def said(out: str, probe_id: str) -> tuple[str | None, str | None]:
    """(what ESC said, what NOT said) for one probe in a script's output."""
    esc = re.search(rf"^ESC {re.escape(probe_id)}(?:[ \t](.*))?$", out, re.M)
    nope = re.search(rf"^NOT {re.escape(probe_id)}(?:[ \t](.*))?$", out, re.M)
    return (
        (esc.group(1) or "").strip() if esc else None,
        (nope.group(1) or "").strip() if nope else None,
    )


def judge(probe: Probe, bait: Bait, out: str) -> Verdict:
    if not applicable(probe, bait.values):
        return Verdict(probe, "n/a", f"needs {sorted(probe.needs() - bait.values.keys())}")
    seen = probe.judge(bait, out) if probe.judge is not None else None
    esc, nope = said(out, probe.id)
    if seen is not None:
        return Verdict(probe, "escaped", f"host saw: {seen}")
    if esc is not None:
        return Verdict(probe, "escaped", f"probe: {esc}")
    if nope is not None:
        return Verdict(probe, "blocked", nope)
    # Killed after it started (a limit took it): blocked. Never started (a fork refused
    # because an earlier probe used up the pids): it proves nothing -- broken.
    if re.search(rf"^RAN {re.escape(probe.id)}$", out, re.M):
        return Verdict(probe, "blocked", "killed")
    return Verdict(probe, "broken", "never ran" if f"TRY {probe.id}" in out else "not reached")


# -- host-side judges --------------------------------------------------------------------
def listener(kind: Literal["unix", "tcp", "udp"], key: str) -> Judge:
    def seen(bait: Bait, out: str) -> str | None:
        table = {"unix": bait.unix, "tcp": bait.tcp, "udp": bait.udp}[kind]
        addr = bait.values.get(key, key)
        got = table[key if kind == "unix" else addr].got
        return f"{kind} listener {addr} got {got[:2]}" if got else None

    return seen


def file_has(template: str, marker: str) -> Judge:
    def seen(bait: Bait, out: str) -> str | None:
        path = fill(template, bait.values)
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            return None
        wanted = fill(marker, bait.values)
        return f"{path} now holds {wanted!r}" if wanted in text else None

    return seen


def exists(template: str) -> Judge:
    def seen(bait: Bait, out: str) -> str | None:
        import os

        path = fill(template, bait.values)
        return f"{path} was created" if os.path.lexists(path) else None

    return seen


def secret_in_output(bait: Bait, out: str) -> str | None:
    return "the host process's secret is in the output" if bait.secret in out else None


def died(key: str) -> Judge:
    def seen(bait: Bait, out: str) -> str | None:
        return None if bait.alive(key) else f"host process {bait.values[key]} is dead"

    return seen
