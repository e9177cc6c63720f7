"""Five-axis conformance of the host-process arms on this machine (design §15).

Every axis of bwrap, the copied tree and `where = "host"` is observed with real commands
through the ExecTool and read back from the host; the arm's claimed `Assurances` must equal
what was observed on every axis. Seatbelt runs on macOS and the Job Object on Windows (the
acceptance workflow's macos-latest / windows-latest jobs); each test selects itself by
platform. Probes: tests/integration/conformance.py.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from sprawl_orch.config import Config, parse_config
from sprawl_orch.core.arms import ASSURANCES, ArmName
from sprawl_orch.core.assurances import Assurances, Guarantee, Kept
from sprawl_orch.tool.exec_tool import ExecTool
from tests.integration.conformance import (
    MiB,
    Observed,
    absent,
    assert_conformance,
    exec_runner,
    host_principal,
    observe_all,
    table,
    the_copy,
)
from tests.integration.conformance_dialects import Dialect, PythonDialect, ShDialect

LIMIT = 64 * MiB
LINUX = sys.platform.startswith("linux")
# Windows' socket layer can't load its providers without SystemRoot (WinError 10106), which
# the environment floor doesn't pass: without it the network probe would fail for a reason
# that is not confinement.
PASS = ("SYSTEMROOT",) if sys.platform == "win32" else ()
# The arm alone (without the exec tool) is proven on Windows by test_job_object_arm.py.


def dialects() -> list[pytest.param]:  # type: ignore[valid-type]
    params = [pytest.param(PythonDialect(), id="python")]
    if os.name == "posix" and shutil.which("busybox"):
        # The busybox dialect is what a container image runs; proving it here on the
        # host arms tests the probes the container conformance reuses.
        params.append(pytest.param(ShDialect("busybox "), id="busybox-sh"))
    return params


def config(tmp_path: Path, arm: str) -> Config:
    return parse_config(
        {
            "sandbox": {
                "arm": arm,
                "scratch_dir": str(tmp_path / "scratch"),
                "env_passthrough": list(PASS),
                "container": {"memory_bytes": LIMIT},
            },
            "state": {"dir": str(tmp_path / "state")},
        }
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print('hello')\n")
    (tmp_path / "scratch").mkdir()
    return root


def conform(
    tool: ExecTool,
    tree: Path,
    scratch: Path,
    dialect: Dialect,
    where: str = "sandbox",
    abs_refused: bool = False,
    other: ExecTool | None = None,
) -> None:
    """`other`: a second tool (another working directory, the same config) whose command
    tries to reach this one's copy: the user axis is a principal of its own only if it
    can't (native arms without a namespace between commands)."""
    arm = tool.arm() if where == "sandbox" else None
    claimed: Assurances = arm.assurances() if arm is not None else ASSURANCES[ArmName.HOST]
    name = arm.name.value if arm is not None else "host"
    run = exec_runner(tool, where=where)
    copy = (lambda: the_copy(tool.state)) if where == "sandbox" else (lambda: None)
    observed = observe_all(
        run, dialect, workdir=tree, copy=copy, limit_bytes=LIMIT, abs_refused=abs_refused
    )
    if other is not None:
        reached = _reaches_the_copy(other, the_copy(tool.state), dialect)
        if reached is not None:
            observed[Guarantee.USER] = Observed(Guarantee.USER, Kept.NO, reached)
    print(table(name, observed))
    # The result's own statement says the same as the arm's claim.
    stated = tool.exec(list(PythonDialect().write("stated")), where=where)  # type: ignore[arg-type]
    assert stated.confinement is not None
    assert stated.confinement.assurances == {a.value: k.value for a, k in claimed.axes().items()}
    assert_conformance(claimed, observed)


def _reaches_the_copy(other: ExecTool, copy: Path | None, dialect: Dialect) -> str | None:
    """A chmod, by absolute path, of a file in the first command's copy, from another
    working directory's command: what changed, or None."""
    assert copy is not None, "the first tool has no copy to reach"
    target = copy / "src" / "main.py"
    before = target.stat().st_mode & 0o777
    other.exec(list(dialect.chmod(str(target))))
    after = target.stat().st_mode & 0o777
    if after == before:
        return None
    return f"another working directory's command chmod-ed {target}: {before:o} -> {after:o}"


def caller_secret(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A 0600 file of ours outside the copy, in a directory the sandbox does show (a tool
    directory on PATH is bound read-only): only its owner may read it. In the caller's
    home, not under tmp_path: the view never binds /tmp or /var/tmp, whatever PATH says
    (core/credential_places.py); the caller removes it (the tools directory's parent)."""
    tools = Path(tempfile.mkdtemp(prefix=".sprawl-conform-", dir=Path.home())) / "bin"
    tools.mkdir()
    secret = tools / "ours-only.txt"
    secret.write_text("ours")
    secret.chmod(0o600)
    environ = dict(os.environ)
    environ["PATH"] = f"{tools}{os.pathsep}{environ.get('PATH', os.defpath)}"
    return secret, environ


def host_side_user(tool: ExecTool, secret: Path) -> dict[str, object]:
    """What the host sees of the command's principal: the real uid of its process in
    /proc/<pid>/status (not what the command says of itself), whether that uid is ours or
    a passwd account, and whether the command could read our 0600 file."""
    marker = f"sprawl-user-{os.getpid()}-{id(tool)}"
    started = tool.exec(["sh", "-c", f"sleep 30; : {marker}"], timeout=0.5)
    assert started.outcome == "backgrounded" and started.handle is not None, started
    try:

        def shells() -> list[psutil.Process]:
            return [
                p
                for p in psutil.process_iter(["cmdline"])
                if any(marker in part for part in (p.info["cmdline"] or []))
                and (p.info["cmdline"] or [""])[0] in ("sh", "/bin/sh", "/usr/bin/sh")
            ]

        # The arm may still be setting up (bwrap's namespaces) when the 0.5 s window ends.
        deadline = time.monotonic() + 30
        while not (procs := shells()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert procs, "the command's process was not found from the host"
        with open(f"/proc/{procs[0].pid}/status") as f:
            uid_line = next(line for line in f if line.startswith("Uid:"))
        real_uid = int(uid_line.split()[1])
    finally:
        tool.halt(started.handle)
    read = tool.exec(["cat", str(secret)])
    return {
        "real_uid": real_uid,
        "ours": real_uid == os.getuid(),
        "account": host_principal(real_uid),
        "read_secret": read.exit_code == 0 and "ours" in read.stdout,
        "read_said": read.stderr.strip(),
    }


@pytest.mark.skipif(not LINUX, reason="bwrap is the Linux native arm (ubuntu jobs run this)")
@pytest.mark.parametrize("dialect", dialects())
def test_bwrap_conforms(tmp_path: Path, tree: Path, dialect: Dialect) -> None:
    """As the caller this test runs as (root in CI: the row "bwrap as root"; the non-root
    row runs this file as another account, test_bwrap_nonroot.py)."""
    if shutil.which("bwrap") is None:
        absent("bwrap", "not installed (apt-get install bubblewrap)")
    secret, environ = caller_secret(tmp_path)
    try:
        with ExecTool(config(tmp_path, "native"), tree, environ=environ) as tool:
            if tool.choice.arm is not ArmName.LINUX_NAMESPACES:
                absent("the linux_namespaces arm", tool.choice.reason())
            conform(tool, tree, tmp_path / "scratch", dialect)
            seen = host_side_user(tool, secret)
            kept = tool.arm().assurances().kept(Guarantee.USER)
    finally:
        shutil.rmtree(secret.parent.parent, ignore_errors=True)
    print(f"bwrap as uid {os.getuid()}: user={'yes' if kept else 'no'}; host side: {seen}")
    # The user axis from the host side agrees with the claim, every way.
    independent = not seen["ours"] and seen["account"] is None and not seen["read_secret"]
    assert kept == independent, seen
    assert kept == (os.getuid() == 0)
    if kept:
        assert "Permission denied" in str(seen["read_said"])


@pytest.mark.skipif(not LINUX, reason="Landlock is Linux's")
@pytest.mark.parametrize("dialect", dialects())
def test_landlock_conforms(tmp_path: Path, tree: Path, dialect: Dialect) -> None:
    """The landlock mechanism, forced by `[sandbox.native] mechanism` (never by a machine-wide
    sysctl other suites depend on). No mount namespace: the write by the tree's absolute
    path must be refused, not land. As root the command runs as sprawl-orch's own uid, as
    every landlock command of every working directory does, with nothing between them: a
    second tool's command chmods this one's copy (user: no). The non-root row is
    test_bwrap_nonroot.py's."""
    secret, environ = caller_secret(tmp_path)
    data = config(tmp_path, "native").model_dump(by_alias=True, exclude={"source"})
    data["sandbox"]["native"] = {"mechanism": "landlock"}
    second = tmp_path / "second"
    second.mkdir()
    try:
        with (
            ExecTool(parse_config(data), tree, environ=environ) as tool,
            ExecTool(parse_config(data), second, environ=environ) as other,
        ):
            if tool.choice.arm is not ArmName.LANDLOCK:
                absent("the landlock mechanism", tool.choice.reason())
            conform(tool, tree, tmp_path / "scratch", dialect, abs_refused=True, other=other)
            seen = host_side_user(tool, secret)
            kept = tool.arm().assurances().kept(Guarantee.USER)
    finally:
        shutil.rmtree(secret.parent.parent, ignore_errors=True)
    print(f"landlock as uid {os.getuid()}: user={'yes' if kept else 'no'}; host side: {seen}")
    assert not kept
    # As root the host sees sprawl-orch's own uid, not ours: what is missing for the user axis
    # is the separation between commands (the chmod above), not the uid.
    assert seen["ours"] is (os.getuid() != 0), seen


@pytest.mark.parametrize("dialect", dialects())
def test_copied_tree_conforms(tmp_path: Path, tree: Path, dialect: Dialect) -> None:
    with ExecTool(config(tmp_path, "copied_tree"), tree) as tool:
        assert tool.choice.arm is ArmName.COPIED_TREE
        conform(tool, tree, tmp_path / "scratch", dialect)


@pytest.mark.parametrize("dialect", dialects())
def test_host_conforms_and_its_writes_land(tmp_path: Path, tree: Path, dialect: Dialect) -> None:
    with ExecTool(config(tmp_path, "copied_tree"), tree) as tool:
        conform(tool, tree, tmp_path / "scratch", dialect, where="host")
        # "untouched" is a capability of the sandbox arms, not a command that didn't write.
        tool.exec(list(dialect.write("landed.txt")), where="host")
    assert (tree / "landed.txt").exists()


@pytest.mark.skipif(sys.platform != "darwin", reason="Seatbelt is macOS's (macos-latest job)")
def test_seatbelt_conforms(tmp_path: Path, tree: Path) -> None:
    with ExecTool(config(tmp_path, "native"), tree) as tool:
        if tool.choice.arm is not ArmName.MACOS_SEATBELT:
            absent("the macos_seatbelt arm", tool.choice.reason())
        conform(tool, tree, tmp_path / "scratch", PythonDialect())


@pytest.mark.skipif(sys.platform != "win32", reason="Job Objects are Windows' (windows-latest)")
def test_windows_job_conforms(tmp_path: Path, tree: Path) -> None:
    with ExecTool(config(tmp_path, "native"), tree) as tool:
        if tool.choice.arm is not ArmName.WINDOWS_JOB:
            absent("the windows_job arm", tool.choice.reason())
        conform(tool, tree, tmp_path / "scratch", PythonDialect())
