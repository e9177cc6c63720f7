"""Two copies, one principal? (issue #14: podman --userns=auto claims "each container gets
65536 uids of its own"; the user axis claims a principal of its own.)

podman hands out an --userns=auto range only while no container holds it; the copy of a
working directory stays owned by the range its last command had. When that command's
container is gone, podman may hand the same range to another working directory's command
(on a quiet machine it does: the lowest free range). A copy whose owner names a range must
then not make its next command take that range by an explicit --uidmap while another
container holds it: two commands of two copies would run at once as one host uid.

The state is made the way it arises: copy B's command is running with range R; copy A is
owned by R's uid (as after an earlier command of A that got R before B's was created); then
A's command runs. Its host uid, read from the host, must differ from B's.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from sprawl_orch.config import parse_config
from sprawl_orch.container.ownership import own_copy
from sprawl_orch.runs.results import ExecResult
from sprawl_orch.tool.exec_tool import ExecTool

WAIT_S = 180.0


def tool_for(tmp: Path, name: str, image: str) -> ExecTool:
    tree = tmp / name
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    data = {
        "sandbox": {
            "arm": "container",
            "scratch_dir": str(tmp / "scratch"),
            "container": {"engine": "podman", "images": {"podman": image}},
        },
        "state": {"dir": str(tmp / "state")},
    }
    return ExecTool(parse_config(data), tree)


def copy_with(tmp: Path, name: str) -> Path | None:
    """The persistent copy (state/copies/<key>/<slot>/tree) holding file `name`."""
    found = list((tmp / "state" / "copies").glob(f"*/*/tree/{name}"))
    return found[0].parent if found else None


def wait_for(what: str, check: object, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.1)


def test_two_copies_never_run_as_one_host_uid(tmp_path: Path, podman_image: str) -> None:
    (tmp_path / "scratch").mkdir()
    a = tool_for(tmp_path, "A", podman_image)
    b = tool_for(tmp_path, "B", podman_image)
    done: dict[str, ExecResult] = {}
    holder = threading.Thread(
        target=lambda: done.setdefault(
            "b",
            b.exec(
                ["sh", "-c", "touch b-started; while [ ! -e stop ]; do sleep 0.2; done"],
                timeout=2 * WAIT_S,
            ),
        )
    )
    try:
        first = a.exec(["true"], timeout=WAIT_S)  # A's persistent copy exists
        assert first.outcome == "settled" and first.exit_code == 0, first.as_json_dict()
        holder.start()
        wait_for(
            "B's command to start",
            lambda: copy_with(tmp_path, "b-started") is not None or "b" in done,
        )
        b_copy = copy_with(tmp_path, "b-started")
        assert b_copy is not None, done.get("b")
        b_uid, b_gid = (os.stat(b_copy / "b-started").st_uid, os.stat(b_copy / "b-started").st_gid)
        a_copy = next(
            p
            for p in (tmp_path / "state" / "copies").glob("*/*/tree")
            if (p / "a.txt").exists() and p != b_copy
        )
        own_copy(a_copy, b_uid, b_gid)  # as if A's last command had had B's range
        second = a.exec(["sh", "-c", "touch a-mine"], timeout=WAIT_S)
        assert second.outcome == "settled" and second.exit_code == 0, second.as_json_dict()
        assert "b" not in done, "B's command ended before A's ran: nothing was tried"
        a_uid = os.stat(a_copy / "a-mine").st_uid
        argv = (second.as_json_dict().get("container") or {}).get("argv")
        assert a_uid != b_uid, (
            f"the commands of copies A and B ran at once as host uid {a_uid}: {argv}"
        )
    finally:
        b_copy = copy_with(tmp_path, "b-started")
        if b_copy is not None:
            (b_copy / "stop").touch()
        if holder.is_alive() or holder.ident is not None:
            holder.join(2 * WAIT_S)
        a.close()
        b.close()
