"""The socket policy (socket_policy.py) on every arm that claims network, from the inside:
what it refuses fails with an errno, and what ordinary commands need still works -- inet
and inet6 sockets, route netlink (`ip addr`, glibc's getaddrinfo), unix sockets where the
arm allows them, and, on bwrap (the host's own tools), python, pip and git.

Each call is one raw syscall from a static program (tests/escapes/sysprobe.py) placed in
the tree; a refused family counts only where the same program opens it unconfined (a
kernel without the family proves nothing). No socket is ever connected: vsock least of all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sprawl_orch.config import parse_config
from sprawl_orch.container import admission
from sprawl_orch.container.gvisor import runsc_path
from sprawl_orch.container.seccomp_profile import PODMAN_DEFAULT
from sprawl_orch.runs.results import ExecResult
from sprawl_orch.tool.exec_tool import ExecTool
from tests.escapes.probes_sock import CALLS, _run_unconfined
from tests.escapes.sysprobe import (
    I386_GETPID,
    I386_SOCKETCALL,
    PTR,
    SYS_SOCKET,
    program,
    program32,
    supported,
)
from tests.integration.conftest import missing

SOCKET, SOCKETPAIR = 41, 53
ALLOWED: dict[str, tuple[int, tuple[int, ...]]] = {
    "inet-stream": (SOCKET, (2, 1, 0)),
    "inet-dgram": (SOCKET, (2, 2, 0)),
    "inet6-stream": (SOCKET, (10, 1, 0)),
    "netlink-route": (SOCKET, (16, 3, 0)),
    "netlink-route-dgram": (SOCKET, (16, 2, 0)),
}
UNIX: dict[str, tuple[int, tuple[int, ...]]] = {
    "unix-stream": (SOCKET, (1, 1, 0)),
    "unix-pair": (SOCKETPAIR, (1, 1, 0, PTR)),
}
ARMS = ("docker", "podman", "docker-runsc", "podman-runsc", "docker-userns", "linux_namespaces")


def _tree(root: Path, calls: dict[str, tuple[int, tuple[int, ...]]]) -> tuple[Path, str]:
    tree = root / "tree"
    tree.mkdir()
    lines = []
    for name, (nr, args) in calls.items():
        path = tree / f"call-{name}"
        path.write_bytes(program(nr, *args))
        path.chmod(0o755)
        lines.append(f'./call-{name}; echo "CALL {name} $?"')
    lines += ["ip addr 2>&1; echo IPADDR $?", "ip route 2>&1; echo IPROUTE $?"]
    return tree, "\n".join(lines)


def _config(arm: str, tmp: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    scratch = tmp / "scratch"
    scratch.mkdir()
    sandbox: dict[str, Any] = {"scratch_dir": str(scratch)}
    if arm == "linux_namespaces":
        if shutil.which("bwrap") is None:
            missing("bwrap is not installed (apt-get install bubblewrap)")
        sandbox["arm"] = "native"
    else:
        engine, _, variant = arm.partition("-")
        if variant == "runsc" and runsc_path() is None:
            missing("runsc is not installed (apt-get install runsc; .ci/setup-engines does)")
        container: dict[str, Any] = {"engine": engine}
        if variant == "userns":
            env, image = request.getfixturevalue("docker_userns")
            container["docker_host"] = env["DOCKER_HOST"]
        else:
            image = str(request.getfixturevalue(f"{engine}_image"))
        container["images"] = {engine: image}
        if variant == "runsc":
            container["runtime"] = "runsc"
        sandbox |= {"arm": "container", "container": container}
    return {"sandbox": sandbox, "state": {"dir": str(tmp / "state")}}


def _exec(tool: ExecTool, script: str) -> ExecResult:
    result = tool.exec(["sh", "-c", script], timeout=120, background_ok=False)
    assert result.outcome == "settled", result.as_json_dict()
    assert result.confinement is not None
    assert result.confinement.assurances["network"] == "yes"
    return result


@pytest.mark.parametrize("arm", ARMS)
def test_refused_families_fail_and_what_commands_need_works(
    arm: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not supported():
        missing("the probe programs are built for x86_64 only (tests/escapes/sysprobe.py)")
    unix = arm != "linux_namespaces"  # bwrap refuses AF_UNIX outright (seccomp_filter.py)
    refused = {n: c for n, c in CALLS.items() if _run_unconfined(program(c[0], *c[1])) == 0}
    assert "vsock-stream" in refused and "io-uring-setup" in refused, "nothing to prove here"
    calls = {**ALLOWED, **UNIX, **refused}
    tree, script = _tree(tmp_path, calls)
    with ExecTool(parse_config(_config(arm, tmp_path, request)), tree) as tool:
        result = _exec(tool, script)
    got = {
        line.split()[1]: int(line.split()[2])
        for line in result.stdout.splitlines()
        if line.startswith("CALL ")
    }
    assert set(got) == set(calls), result.stdout + result.stderr
    for name in refused:
        assert 0 < got[name] < 126, f"{name}: {got[name]} (0: a socket was made)"
    for name in ALLOWED:
        assert got[name] == 0, f"{name} refused with errno {got[name]}"
    # a new unix socket only where the arm allows it; a connected stream pair everywhere
    # (pipes between the command's own processes)
    assert (got["unix-stream"] == 0) == unix, got["unix-stream"]
    assert got["unix-pair"] == 0, got["unix-pair"]
    # `ip` reads interfaces and routes over route netlink: the namespace's loopback
    assert "IPADDR 0" in result.stdout and " lo" in result.stdout, result.stdout
    assert "IPROUTE 0" in result.stdout, result.stdout


def test_python_pip_git_and_getaddrinfo_still_work_under_bwrap(tmp_path: Path) -> None:
    """The host's own tools inside the bwrap arm's filter: an interpreter, pip, git, and
    glibc's resolver (AI_ADDRCONFIG reads the interfaces over route netlink)."""
    if shutil.which("bwrap") is None or shutil.which("git") is None:
        missing("bwrap and git are needed (apt-get install bubblewrap git)")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    config = {
        "sandbox": {"arm": "native", "scratch_dir": str(scratch)},
        "state": {"dir": str(tmp_path / "state")},
    }
    lookup = (
        "import socket; "
        "print('GAI', sorted({a[4][0] for a in socket.getaddrinfo('localhost', 80)})); "
        "print('GAI-ADDRCONFIG', len(socket.getaddrinfo('127.0.0.1', 80, "
        "flags=socket.AI_ADDRCONFIG | socket.AI_NUMERICHOST)))"
    )
    script = f"""python3 -c "{lookup}" 2>&1
python3 -m pip --version >/dev/null 2>&1; echo "PIP $?"
git init -q . && git -c user.email=a@b -c user.name=a add a.txt && \
git -c user.email=a@b -c user.name=a commit -qm one && echo "GIT ok" """
    with ExecTool(parse_config(config), tree) as tool:
        result = _exec(tool, script)
    out = result.stdout
    assert "GAI ['127.0.0.1'" in out, out + result.stderr
    found = [ln for ln in out.splitlines() if ln.startswith("GAI-ADDRCONFIG ")]
    assert found and int(found[0].split()[1]) > 0, out + result.stderr  # one per socket type
    assert "PIP 0" in out and "GIT ok" in out, out + result.stderr


def test_podman_base_in_the_flat_architectures_spelling_keeps_i386_refused(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """containers.conf's seccomp_profile is the caller's: podman's own default rewritten
    with `architectures` (SCMP_ARCH_X86 listed) in place of `archMap`. Measured before the
    fix (attack7): i386 socketcall(SYS_SOCKET, AF_VSOCK) made a vsock socket with network
    claimed yes."""
    if not supported():
        missing("the probe programs are built for x86_64 only (tests/escapes/sysprobe.py)")
    control = program32(I386_GETPID)
    vsock = program32(I386_SOCKETCALL, SYS_SOCKET, PTR, packed=(40, 1, 0))
    if _run_unconfined(control) != 0 or _run_unconfined(vsock) != 0:
        missing("this kernel runs no i386 program or has no AF_VSOCK: nothing to prove")
    base = json.loads(Path(PODMAN_DEFAULT).read_text(encoding="utf-8"))
    base.pop("archMap", None)
    base["architectures"] = ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]
    (tmp_path / "prof.json").write_text(json.dumps(base), encoding="utf-8")
    conf = tmp_path / "containers.conf"
    conf.write_text(f'[containers]\nseccomp_profile = "{tmp_path / "prof.json"}"\n')
    monkeypatch.setenv("CONTAINERS_CONF", str(conf))
    admission.clear_cache()
    request.addfinalizer(admission.clear_cache)
    tree = tmp_path / "tree"
    tree.mkdir()
    for name, elf in (("control", control), ("vsock", vsock)):
        (tree / name).write_bytes(elf)
        (tree / name).chmod(0o755)
    with ExecTool(parse_config(_config("podman", tmp_path, request)), tree) as tool:
        result = _exec(tool, './control; echo "CONTROL $?"; ./vsock; echo "VSOCK $?"')
    got = dict(
        ln.split() for ln in result.stdout.splitlines() if ln.split()[0] in ("CONTROL", "VSOCK")
    )
    assert set(got) == {"CONTROL", "VSOCK"}, result.stdout + result.stderr
    # the i386 ABI is refused whole (SIGSYS: 159), or at least the socket is
    assert got["VSOCK"] != "0", got
    assert got["CONTROL"] == "159", got
