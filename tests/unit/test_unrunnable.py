"""A program that can't run is E_TOOL_UNAVAILABLE (issue #13): the host-side check every
host arm makes, and the engines' words for the same cases (recorded from docker 20.10 and
podman 4.3 with runc 1.1.5 on these machines; tests/integration/test_contract_real.py runs
them for real)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.core.unrunnable import (
    after_start_refusal,
    elf_problem,
    host_venv,
    loader_refusal,
    runtime_refusal,
)
from sprawl_orch.runs.yielding import find_program


def unrunnable_tree(root: Path) -> dict[str, str]:
    """One file per way a program can fail to run; name -> the words the refusal says."""
    root.mkdir(exist_ok=True)
    (root / "notexec.txt").write_text("hi\n")
    (root / "adir").mkdir()
    (root / "broken.sh").write_text("#!/nonexistent/interp\necho x\n")
    (root / "empty-shebang.sh").write_text("#!\necho x\n")
    (root / "truncated").write_bytes(b"\x7fELFjunk")
    native = bytearray(Path(sys.executable).resolve().read_bytes()[:4096])
    native[18:20] = b"\x28\x00"  # e_machine = ARM
    (root / "foreign").write_bytes(bytes(native))
    (root / "dangling").symlink_to(root / "nowhere")
    for name in ("broken.sh", "empty-shebang.sh", "truncated", "foreign"):
        (root / name).chmod(0o755)
    return {
        "./notexec.txt": "no execute bit",
        "nosuchprog-xyz": "not found on PATH",
        "./adir": "is a directory",
        "./broken.sh": "names /nonexistent/interp",
        "./empty-shebang.sh": "names no interpreter",
        "./truncated": "truncated ELF",
        "./foreign": "for another machine",
        "./dangling": "link to nothing",
        "/bin/nosuch-xyz": "does not exist",
        "./missing": "does not exist",
    }


def test_every_unrunnable_program_is_refused_on_the_host(tmp_path: Path) -> None:
    cases = unrunnable_tree(tmp_path / "t")
    env = {"PATH": os.defpath}
    for program, words in cases.items():
        with pytest.raises(SprawlError) as caught:
            find_program(program, env, str(tmp_path / "t"))
        assert caught.value.code is ErrorCode.TOOL_UNAVAILABLE, program
        assert words in caught.value.detail, (program, caught.value.detail)
        assert "use the shell arm" in caught.value.recovery


def test_runnable_programs_pass(tmp_path: Path) -> None:
    (tmp_path / "ok.sh").write_text("#!/bin/sh\necho ok\n")
    (tmp_path / "ok.sh").chmod(0o755)
    (tmp_path / "env.sh").write_text("#!/usr/bin/env sh\necho ok\n")
    (tmp_path / "env.sh").chmod(0o755)
    env = {"PATH": os.defpath}
    assert find_program("./ok.sh", env, str(tmp_path)) == "./ok.sh"
    assert find_program("./env.sh", env, str(tmp_path)) == "./env.sh"
    assert find_program("sh", env, str(tmp_path)) == shutil.which("sh", path=os.defpath)
    assert elf_problem(Path(sys.executable).resolve()) is None


def test_a_missing_elf_loader_is_named(tmp_path: Path) -> None:
    data = bytearray(Path("/bin/true").read_bytes())
    loader = data.find(b"/lib64/ld-linux-x86-64.so.2")
    if loader < 0:
        pytest.skip("/bin/true has no x86-64 glibc loader path to rewrite")
    data[loader : loader + 27] = b"/lib64/ld-nothere-x86.so.22"
    (tmp_path / "noloader").write_bytes(bytes(data))
    assert "ld-nothere-x86.so.22" in (elf_problem(tmp_path / "noloader") or "")


DOCKER = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable "
    'to start container process: exec: "{p}": {why}: unknown'
)
PODMAN = (
    "Error: unable to start container 7e9c: runc: runc create failed: unable to start "
    'container process: exec: "{p}": {why}: OCI permission denied\n'
)


@pytest.mark.parametrize("template", [DOCKER, PODMAN], ids=["docker", "podman"])
@pytest.mark.parametrize(
    ("why", "said"),
    [
        ("permission denied", "is not executable there"),
        ("executable file not found in $PATH", "not found on the image's PATH"),
        ("stat /bin/nosuch: no such file or directory", "does not exist in the container"),
    ],
)
def test_the_engines_words_become_a_refusal(template: str, why: str, said: str) -> None:
    refusal = runtime_refusal(template.format(p="./x", why=why), "./x")
    assert refusal is not None and refusal.code is ErrorCode.TOOL_UNAVAILABLE
    assert said in refusal.detail and refusal.subject == "./x"
    assert runtime_refusal("Error: OCI runtime error: cgroup busy", "./x") is None


def test_runcs_after_start_exec_failure_is_a_refusal_and_nothing_else_is() -> None:
    said = after_start_refusal("./b.sh", 1, 0, "exec ./b.sh: no such file or directory\n")
    assert said is not None and "does not exist in the container" in said.detail
    assert after_start_refusal("./b.sh", 1, 0, "exec ./b.sh: exec format error\n") is not None
    # the command's own output, another exit code, another program: the command's result
    assert after_start_refusal("./b.sh", 1, 3, "exec ./b.sh: exec format error\n") is None
    assert after_start_refusal("./b.sh", 2, 0, "exec ./b.sh: exec format error\n") is None
    assert after_start_refusal("./c.sh", 1, 0, "exec ./b.sh: exec format error\n") is None
    assert after_start_refusal("./b.sh", 1, 0, "x\nexec ./b.sh: exec format error\n") is None


def make_venv(tree: Path) -> None:
    (tree / ".venv" / "bin").mkdir(parents=True)
    (tree / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tree / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (tree / "tool.py").write_text(f"#!{tree}/.venv/bin/python\nprint(1)\n")


def test_a_host_virtualenv_is_named(tmp_path: Path) -> None:
    make_venv(tmp_path)
    for program in ("./.venv/bin/python", "./tool.py", f"{tmp_path}/.venv/bin/python"):
        said = host_venv(tmp_path, program)
        assert said is not None and "host virtualenv .venv/" in said, program
        assert os.path.realpath(sys.executable) in said
    assert host_venv(tmp_path, "python3") is None
    (tmp_path / "plain.sh").write_text("#!/bin/sh\necho\n")
    assert host_venv(tmp_path, "./plain.sh") is None  # a script of the tree, not a venv's
    words = (
        "/work/.venv/bin/python: error while loading shared libraries: libpython3.11.so"
        ".1.0: cannot open shared object file: No such file or directory\n"
    )
    venv = host_venv(tmp_path, "./.venv/bin/python")
    refusal = loader_refusal("./.venv/bin/python", 127, words, venv)
    assert refusal is not None and refusal.code is ErrorCode.TOOL_UNAVAILABLE
    assert "libpython3.11.so.1.0" in refusal.detail and "python3 -m venv" in refusal.recovery
    assert loader_refusal("./.venv/bin/python", 127, words, None) is None  # not a venv: as is


def test_other_ways_to_be_unreachable_are_refused_too(tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to("loop")
    os.mkfifo(tmp_path / "fifo")
    env = {"PATH": os.defpath}
    for program, words in (("./loop", "symbolic links"), ("./fifo", "not a regular file")):
        with pytest.raises(SprawlError) as caught:
            find_program(program, env, str(tmp_path))
        assert caught.value.code is ErrorCode.TOOL_UNAVAILABLE and words in caught.value.detail


def test_any_errno_runc_names_for_the_program_is_a_refusal() -> None:
    words = DOCKER.format(p="./loop", why="stat ./loop: too many levels of symbolic links")
    refusal = runtime_refusal(words, "./loop")
    assert refusal is not None and "too many levels of symbolic links" in refusal.detail
    busy = after_start_refusal("./x", 1, 0, "exec ./x: text file busy\n")
    assert busy is not None and "text file busy" in busy.detail


def test_paths_are_accepted_as_arguments(tmp_path: Path) -> None:
    from sprawl_orch.selection.offerings import Offerings
    from sprawl_orch.tool.exec_tool import ExecTool
    from tests.unit.conftest import make_config

    (tmp_path / "tree").mkdir()
    (tmp_path / "scratch").mkdir()
    offerings = Offerings(platform="linux", scratch=tmp_path / "scratch")
    with ExecTool(
        make_config(tmp_path, arm="copied_tree"), tmp_path / "tree", offerings=offerings
    ) as tool:
        result = tool.exec([Path("/bin/echo"), Path("a b")])  # type: ignore[list-item]
    assert result.stdout == "a b\n"
