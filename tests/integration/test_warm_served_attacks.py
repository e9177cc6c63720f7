"""Attacks on the served warm call (issue 26, docs/warm.md), on real docker and podman:
what one call leaves must not reach the next one, and a killed client's command must end
even while other calls run."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.conftest import holding as _holding
from tests.integration.test_warm_served import HOLD, WAIT, Place, _in_container
from tests.integration.test_warm_served import place as place  # the fixture


def _started(place: Place, tree: object, config: object, token: str) -> subprocess.Popen[bytes]:
    client = subprocess.Popen(
        place.argv(tree, config, "sh", "-c", HOLD, token, as_json=False),  # type: ignore[arg-type]
        env=place.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert client.stdout is not None
    assert client.stdout.readline() == b"started\n"
    return client


@pytest.mark.parametrize("other", ["warm = true", "warm = false", 'arm = "native"'])
def test_a_killed_clients_command_ends_while_another_call_runs(place: Place, other: str) -> None:
    """Every call forked after a container was given back inherits its owning connection:
    while any such call runs (here a long command in another directory, warm or cold),
    closing the server's copy is no EOF at the guardian, and the killed client's command
    ran on."""
    tree, config = place.tree("t"), place.config("c")
    kept = str(place.call(tree, config, "true")["id"])
    cold = place.config("cold")
    said = cold.read_text()
    cold.write_text(said.replace(other.split(" = ")[0] + " = ", f"{other}\n# was: ", 1))
    other = f"warm-served-{secrets.token_hex(6)}"
    long = _started(place, place.tree("u"), cold, other)  # forked with the kept one's link
    try:
        token = f"warm-served-{secrets.token_hex(6)}"
        client = _started(place, tree, config, token)
        assert any(_in_container(pid, kept) for pid in _holding(token)), "in the kept one"
        os.kill(client.pid, signal.SIGKILL)
        client.wait()
        deadline = time.monotonic() + WAIT
        while _holding(token):
            assert time.monotonic() < deadline, f"still running: {_holding(token)}"
            time.sleep(0.2)
        place.wait_gone({kept})
        assert long.poll() is None, "the other call ran all along"
    finally:
        os.kill(long.pid, signal.SIGKILL)
        long.wait(timeout=60)


def test_a_lock_file_replaced_by_a_link_is_not_followed_nor_fatal(place: Place) -> None:
    tree, config = place.tree("t"), place.config("c")
    first = place.call(tree, config, "true")
    (lock,) = (place.root / "run" / "sprawl-orch" / "warm").glob("*.lock")
    target = place.root / "elsewhere"
    target.write_text(lock.read_text())
    lock.unlink()
    lock.symlink_to(target)
    after = place.call(tree, config, "true")
    assert after["id"] != first["id"]  # not taken through a link
    assert target.read_text() == "clean 1\n"


def test_a_server_killed_while_a_call_holds_its_container_loses_no_result(place: Place) -> None:
    """The call runs on (its client is alive) and must say its command's result; giving the
    container back to a dead server reset the channel and ended the call with E_INTERNAL."""
    tree, config = place.tree("t"), place.config("c")
    kept = str(place.call(tree, config, "true")["id"])
    token = f"warm-served-{secrets.token_hex(6)}"
    argv = place.argv(tree, config, "sh", "-c", "sleep 4; echo done; true", token)
    client = subprocess.Popen(argv, env=place.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + WAIT
    while not any(_in_container(pid, kept) for pid in _holding(token)):
        assert time.monotonic() < deadline and client.poll() is None, "never ran in the kept one"
        time.sleep(0.05)
    os.kill(place.server_pid(), signal.SIGKILL)
    out, err = client.communicate(timeout=240)
    assert client.returncode == 0, err[-2000:]
    said = json.loads(out)
    assert (said["exit_code"], said["stdout"]) == (0, "done\n"), said
    place.wait_gone({kept})
    after = place.call(tree, config, "true")  # a new server
    assert after["id"] != kept


def test_server_stop_and_a_killed_client_leave_no_lock_file(place: Place) -> None:
    tree, config = place.tree("t"), place.config("c")
    place.call(tree, config, "true")
    client = _started(place, tree, config, f"warm-served-{secrets.token_hex(6)}")
    os.kill(client.pid, signal.SIGKILL)  # the server drops what it held
    client.wait()
    place.call(place.tree("u"), config, "true")
    warm = place.root / "run" / "sprawl-orch" / "warm"
    server = place.server_pid()
    place.stop()
    deadline = time.monotonic() + WAIT
    while Path(f"/proc/{server}").exists():  # `stop` returns when the socket is gone
        assert time.monotonic() < deadline, f"the server {server} still runs"
        time.sleep(0.1)
    assert sorted(p.name for p in warm.iterdir()) == []


def test_what_a_command_leaves_in_the_container_does_not_reach_the_next(place: Place) -> None:
    tree, config = place.tree("t"), place.config("c")
    token = f"warm-served-{secrets.token_hex(6)}"
    first = place.call(
        tree,
        config,
        "sh",
        "-c",
        f"(setsid sh -c 'sleep 1000; echo {token}' &) ; "
        "echo x > /dev/shm/left; echo x > /tmp/left; mkdir -p /tmp/d/e; "
        "head -c 1048576 /dev/zero > /dev/shm/big; true",
    )
    second = place.call(
        tree,
        config,
        "sh",
        "-c",
        'test ! -e /tmp/left && test ! -e /tmp/d && test -z "$(ls -A /dev/shm)" && '
        "! ps -o args | grep -q '[s]leep 1000'",
    )
    assert second["reused"] is True and second["id"] == first["id"]
    assert not _holding(token)
