"""Rootless podman under a non-root account (issue #14 item 3): the container arm run as
`sprawl-orch`'s test account `sprawl-rootless` (created by .ci/setup-engines with a
subordinate range of its own), its five axes observed from the host by that account.

On a cgroup v1 host rootless podman can't set memory/CPU/pids limits ("Resource limits
are not supported and ignored on cgroups V1 rootless systems"): admission's probe sees
them dropped in inspect and the arm claims resources = no — the conformance probe must
then succeed in allocating past the limit. On cgroup v2 with delegation, yes and yes.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import busybox_rootfs_tar, missing

ACCOUNT = "sprawl-rootless"
ROOT = Path(__file__).resolve().parents[2]
PYTHON = "/usr/bin/python3"  # the account can't run an interpreter under root's home


def as_account(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    home = pwd.getpwnam(ACCOUNT).pw_dir
    base = {
        "HOME": home,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "USER": ACCOUNT,
    }
    return subprocess.run(
        [
            "runuser",
            "-u",
            ACCOUNT,
            "--",
            "env",
            "-i",
            *(f"{k}={v}" for k, v in {**base, **(env or {})}.items()),
            *argv,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd="/",
    )


def readable_tree(tmp: Path) -> Path:
    """The repository and its installed packages where the account can read them: here
    when it already can, else copied to a world-readable directory."""
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    if (
        as_account(
            "test",
            "-r",
            str(ROOT / "orchestrator" / "__init__.py"),
            "-a",
            "-r",
            str(site / "pydantic" / "__init__.py"),
        ).returncode
        == 0
    ):
        return ROOT
    dest = tmp / "tree"
    for part in ("orchestrator", "tests", "native_fallbacks", "guardian", "images"):
        shutil.copytree(ROOT / part, dest / part)
    shutil.copytree(site, dest / "site")
    for path in (tmp, *dest.rglob("*")):
        path.chmod(path.stat().st_mode | 0o055)
    tmp.chmod(0o755)
    return dest


@pytest.fixture(scope="module")
def rootless_image() -> Iterator[str]:
    if os.geteuid() != 0:
        missing("switching to the rootless test account needs root")
    try:
        pwd.getpwnam(ACCOUNT)
    except KeyError:
        missing(f"no account {ACCOUNT} (run .ci/setup-engines)")
    if not Path(PYTHON).exists():
        missing(f"{PYTHON} is not installed (apt-get install python3)")
    with tempfile.TemporaryDirectory(prefix="sprawl-rootless-img-") as tmp:
        Path(tmp).chmod(0o755)
        tar = busybox_rootfs_tar(Path(tmp))
        for path in (tar.parent, tar):
            path.chmod(0o755)
        done = as_account("podman", "import", "--message", "sprawl-orch rootless test", str(tar))
    if done.returncode != 0:
        missing(f"rootless podman import as {ACCOUNT} failed: {done.stderr.strip()[-400:]}")
    image = done.stdout.strip().splitlines()[-1]
    image = image if image.startswith("sha256:") else f"sha256:{image}"
    yield image
    as_account("podman", "rmi", image)


def import_view(tree: Path, where: Path) -> Path:
    """`sprawl_orch` as installed (pyproject's package-dir: orchestrator/ is sprawl_orch, the
    other folders its subpackages), made of links into `tree`: the account's interpreter has
    none of root's venv, so it imports the checkout through this view."""
    view = where / "import-view"
    (view / "sprawl_orch").mkdir(parents=True)
    for entry in (tree / "orchestrator").iterdir():
        (view / "sprawl_orch" / entry.name).symlink_to(entry)
    for part in ("guardian", "native_fallbacks", "images"):
        (view / "sprawl_orch" / part).symlink_to(tree / part)
    for path in (where, view, view / "sprawl_orch"):
        path.chmod(0o755)
    return view


def test_rootless_podman_conformance(rootless_image: str, tmp_path: Path) -> None:
    tree = readable_tree(tmp_path)
    site = (
        tree / "site"
        if tree != ROOT
        else Path(next(p for p in sys.path if p.endswith("site-packages")))
    )
    # In /tmp itself: pytest's own temp root is private to root (0700).
    where = Path(tempfile.mkdtemp(prefix="sprawl-rootless-view-", dir="/tmp"))
    try:
        view = import_view(tree, where)
        done = as_account(
            PYTHON,
            "-m",
            "tests.integration.rootless_driver",
            rootless_image,
            env={"PYTHONPATH": f"{tree}:{view}:{site}"},
        )
    finally:
        shutil.rmtree(where, ignore_errors=True)
    result_lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and result_lines, (
        f"the driver failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    result = json.loads(result_lines[-1].removeprefix("RESULT "))
    print("\n" + next(ln for ln in done.stdout.splitlines() if ln.startswith("container (")))
    print(f"  user: {result['evidence']['user']}\n  note: {result['note']}")
    assert result["uid"] == pwd.getpwnam(ACCOUNT).pw_uid != 0
    assert result["userns"] == "rootless"
    # exactly what held, and nothing more: claim == observation on every axis
    assert result["claimed"] == result["observed"], result["evidence"]
    assert result["claimed"]["user"] == "yes"
    assert result["claimed"]["resources"] == ("yes" if result["limits_enforced"] else "no")
    if not result["limits_enforced"]:
        assert "Resources not kept" in result["note"]


def run_exec_driver(image: str, mode: str, tmp_path: Path) -> list[dict[str, object]]:
    """tests/integration/rootless_exec_driver.py as the account: its results, in order."""
    tree = readable_tree(tmp_path)
    site = (
        tree / "site"
        if tree != ROOT
        else Path(next(p for p in sys.path if p.endswith("site-packages")))
    )
    where = Path(tempfile.mkdtemp(prefix="sprawl-rootless-view-", dir="/tmp"))
    try:
        view = import_view(tree, where)
        done = as_account(
            PYTHON,
            "-m",
            "tests.integration.rootless_exec_driver",
            image,
            mode,
            env={"PYTHONPATH": f"{tree}:{view}:{site}"},
        )
    finally:
        shutil.rmtree(where, ignore_errors=True)
    assert done.returncode == 0, f"the driver failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    lines = done.stdout.splitlines()
    assert "TREE " + json.dumps(["a.txt"]) in lines, "the working directory was changed"
    return [json.loads(ln.removeprefix("RESULT ")) for ln in lines if ln.startswith("RESULT ")]


def test_rootless_commands_one_after_another_in_one_copy(
    rootless_image: str, tmp_path: Path
) -> None:
    """Three commands through ExecTool in one persistent copy: each gets the copy (given to
    its subordinate uid at start, taken back after), and the next one's resync, stamps and
    changes work on what the last one handed back."""
    results = run_exec_driver(rootless_image, "cold", tmp_path)
    assert len(results) == 3
    for r in results:
        assert r["outcome"] == "settled" and r["exit_code"] == 0, r
        assert str(r["stdout"]).startswith("65534\noriginal\n"), r
        assert (r["confinement"] or {})["assurances"]["user"] == "yes"  # type: ignore[index]
        assert (r["container"] or {})["host_owner"] != "1001:1001"  # type: ignore[index]
    # the second command's copy was resynced: the first one's file is gone from it
    assert str(results[1]["stdout"]).endswith("a.txt\ntwo.txt\n"), results[1]["stdout"]
    totals = [(r["changes"] or {})["total"] for r in results]  # type: ignore[index]
    assert totals == [1, 1, 3], [r["changes"] for r in results]


def test_rootless_warm_mode_is_refused_and_says_why(rootless_image: str, tmp_path: Path) -> None:
    """Warm mode cleans a kept container from the host between commands, which a rootless
    caller may not do to its subordinate uids: refused before anything is copied or run."""
    results = run_exec_driver(rootless_image, "warm", tmp_path)
    assert len(results) == 3
    for r in results:
        assert r["outcome"] == "exceptional" and r["code"] == "E_SANDBOX_DENIED", r
        assert r["subject"] == "warm mode" and "rootless" in str(r["detail"]), r
        assert "warm = false" in str(r["recovery"]), r


def test_rootless_allow_list_reaches_only_what_is_listed(
    rootless_image: str, tmp_path: Path
) -> None:
    """[sandbox.network] allow on rootless podman as the non-root account: the listener is
    made by a helper that joins the container's user namespace first, then its network
    namespace (a non-root caller holds no capability over it otherwise)."""
    tree = readable_tree(tmp_path)
    site = (
        tree / "site"
        if tree != ROOT
        else Path(next(p for p in sys.path if p.endswith("site-packages")))
    )
    where = Path(tempfile.mkdtemp(prefix="sprawl-rootless-view-", dir="/tmp"))
    try:
        view = import_view(tree, where)
        done = as_account(
            PYTHON,
            "-m",
            "tests.integration.rootless_egress_driver",
            rootless_image,
            env={"PYTHONPATH": f"{tree}:{view}:{site}"},
        )
    finally:
        shutil.rmtree(where, ignore_errors=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["exit_code"] == 0, result
    assert "upstream says hello" in result["stdout"] and "wget=0" in result["stdout"]
    assert "unlisted=1" in result["stdout"]
    assert result["container"]["userns"] == "rootless"
    kinds = [(e["host"], e["allowed"]) for e in result["network"]["egress"]]
    # In the order connections ended (see test_container_reaches_only_what_is_listed).
    assert sorted(kinds) == [("evil.example.org", False), ("localhost", True)]
    assert "through sprawl-orch's proxy" in result["confinement"]["statement"]


def test_doctor_names_podmans_own_pause_process(rootless_image: str) -> None:
    # issue 27, item 16: after rootless podman ran for the account (the fixture imported an
    # image as it), its pause process is podman's; doctor says so instead of leaving it to look
    # like our leftover. Read as root here, for the account's uid.
    from sprawl_orch.engines.podman_pause import pause_note, pause_pid

    uid = pwd.getpwnam(ACCOUNT).pw_uid
    as_account("podman", "run", "--rm", "--network", "none", rootless_image, "true")
    pid = pause_pid({}, uid)
    assert pid is not None, "rootless podman keeps a pause process"
    assert os.readlink(f"/proc/{pid}/exe").endswith("podman")
    note = pause_note({}, uid)
    assert note is not None and f"(pid {pid})" in note and "podman's" in note
    assert pause_note({}, 0) is None  # rootful podman keeps none
