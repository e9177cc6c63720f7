"""The python arm for real (issue 31): CPython 3.12 wasip1 under wasmtime, through ExecTool.

Each axis the arm claims is observed with a real guest: what it wrote, where; what it could
read; a host listener that must hear nothing; a process it could not start; each limit's trap.
The escape suite's python row (tests/escapes/test_python_escapes.py) tries to break them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sprawl_orch import Config, ExecTool, SprawlError
from sprawl_orch.core.errors import ErrorCode
from sprawl_orch.native_fallbacks import wasi_module


@pytest.fixture(scope="module")
def state(python_state: Path) -> Path:
    """The session's state directory (conftest): the first command compiles, the rest load it."""
    return python_state


def tool_for(
    tree: Path, state: Path, python: dict[str, object] | None = None, **sandbox: object
) -> ExecTool:
    config = Config(
        sandbox={"arm": "python", "python": python or {}, **sandbox},
        state={"dir": str(state)},
    )
    return ExecTool(config, tree, environ={**os.environ, "SPRAWL_PY_SECRET": "s3cret"})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    (root / "data.txt").write_text("in the tree\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "show.py").write_text("import sys\nprint('args', sys.argv)\n")
    return root


@pytest.fixture
def tool(tree: Path, state: Path) -> Iterator[ExecTool]:
    with tool_for(tree, state) as t:
        yield t


def test_reads_and_writes_only_the_copy(tool: ExecTool, tree: Path) -> None:
    code = (
        "import os\n"
        "print(os.getcwd())\n"
        "print(open('data.txt').read().strip())\n"
        "open('made.txt', 'w').write('by the guest')\n"
        "open('/tmp/scratch', 'w').write('tmp')\n"
        "print(sorted(os.listdir('/tmp')))\n"
    )
    result = tool.exec(["python", "-c", code])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [str(tree), "in the tree", "['scratch']"]
    assert not (tree / "made.txt").exists()  # the person's tree is untouched
    assert result.changes is not None and result.changes.created == 1
    assert result.confinement is not None
    assert result.confinement.assurances == {
        "filesystem": "yes",
        "network": "yes",
        "process_tree": "yes",
        "user": "no",
        "resources": "yes",
    }
    assert result.changes.handle is not None
    tool.apply(result.changes.handle)
    assert (tree / "made.txt").read_text() == "by the guest"


def test_tmp_is_private_and_empty_each_time(tool: ExecTool) -> None:
    first = tool.exec(["python", "-c", "open('/tmp/left', 'w').write('x')"])
    assert first.exit_code == 0, first.stderr
    second = tool.exec(["python", "-c", "import os; print(os.listdir('/tmp'))"])
    assert second.stdout.strip() == "[]"


def test_outside_the_preopens_nothing_resolves(tool: ExecTool, tree: Path, state: Path) -> None:
    outside = tree.parent / "beside.txt"
    outside.write_text("beside")
    targets = ["/etc/passwd", str(outside), str(state), "../beside.txt", "/", "/proc/self/environ"]
    code = (
        "import sys\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n"
        "        open(p).read(); print('READ', p)\n"
        "    except OSError as e:\n"
        "        print('no', p, e.errno)\n"
    )
    result = tool.exec(["python", "-c", code, *targets])
    assert result.exit_code == 0, result.stderr
    assert "READ" not in result.stdout
    assert len(result.stdout.splitlines()) == len(targets)


def test_a_link_made_inside_pointing_out_is_not_followed(tool: ExecTool, tree: Path) -> None:
    # wasmtime refuses to make a link whose target leaves the preopen (EPERM), and would not
    # follow one out either: each attempt must end in an OSError, never in the file's text.
    code = (
        "import os\n"
        "for link, target, read in (('out', '/etc/passwd', 'out'),\n"
        "                           ('up', '../..', 'up/etc/passwd'),\n"
        "                           ('tmp', '/tmp', 'tmp')):\n"
        "    try:\n"
        "        os.symlink(target, link)\n"
        "        open(read).read(); print('READ', read)\n"
        "    except OSError as e:\n"
        "        print('no', read)\n"
    )
    result = tool.exec(["python", "-c", code])
    assert result.stdout.split() == ["no", "out", "no", "up/etc/passwd", "no", "tmp"], result.stderr


def test_a_link_in_the_tree_pointing_out_reaches_nothing(tool: ExecTool, tree: Path) -> None:
    # The copy's rule decides (copy/links.py, credential_places.py): this target, under the
    # host's /tmp, is refused and named; the guest finds no file, and the outside is untouched.
    outside = tree.parent / "outside.txt"
    outside.write_text("outside")
    (tree / "link").symlink_to(outside)
    code = (
        "try:\n"
        "    print(open('link').read()); open('link', 'w').write('changed')\n"
        "except OSError:\n"
        "    print('no link')\n"
    )
    result = tool.exec(["python", "-c", code])
    assert result.work is not None and "link" in str(result.work.model_dump())
    assert result.stdout.strip() in ("no link", "outside"), result.stderr
    assert outside.read_text() == "outside"


def test_no_socket_no_process(tool: ExecTool) -> None:
    code = (
        "import os, socket, subprocess\n"
        "for name, f in (('socket', lambda: socket.socket()),\n"
        "                ('fork', lambda: os.fork()),\n"
        "                ('system', lambda: os.system('true')),\n"
        "                ('run', lambda: subprocess.run(['true']))):\n"
        "    try:\n"
        "        f(); print('DID', name)\n"
        "    except (OSError, AttributeError, RuntimeError) as e:\n"
        "        print('no', name)\n"
    )
    result = tool.exec(["python", "-c", code])
    assert result.stdout.split() == ["no", "socket", "no", "fork", "no", "system", "no", "run"]


def test_environment_is_the_floor(tool: ExecTool) -> None:
    result = tool.exec(["python", "-c", "import os; print(sorted(os.environ))"])
    names = eval(result.stdout)  # a list literal printed by the guest
    assert "SPRAWL_PY_SECRET" not in names
    assert set(names) <= {"PATH", "LANG", "LC_ALL", "TZ", "HOME"}


def test_script_and_arguments(tool: ExecTool) -> None:
    result = tool.exec(["python", "pkg/show.py", "a", "b c"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().endswith("'a', 'b c']")
    assert "pkg/show.py" in result.stdout


def test_the_trees_venv_pure_python_imports_and_c_extensions_say_why(
    tool: ExecTool, tree: Path
) -> None:
    site = tree / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "purepkg").mkdir(parents=True)
    (site / "purepkg" / "__init__.py").write_text("VALUE = 42\n")
    (site / "fastpkg.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    ok = tool.exec(["python", "-c", "import purepkg; print(purepkg.VALUE)"])
    assert ok.stdout.strip() == "42", ok.stderr
    refused = tool.exec(["python", "-c", "import fastpkg"])
    assert refused.exit_code == 1
    assert "fastpkg is a C extension" in refused.stderr
    assert "cannot load native code" in refused.stderr


def test_fuel_ends_a_loop_as_a_limit(tree: Path, state: Path) -> None:
    with tool_for(tree, state, {"fuel": 300_000_000}) as tool:
        result = tool.exec(["python", "-c", "while True: pass"])
    assert result.limits_hit == ["fuel"]
    assert result.exit_code == 137
    assert result.python is not None and "fuel" in result.python["trap"]
    assert "[sandbox.python] fuel" in result.statement


def test_memory_bomb_hits_the_store_limit(tree: Path, state: Path) -> None:
    bomb = "a = []\nwhile True: a.append(' ' * 10**6)"
    with tool_for(tree, state, {"memory_bytes": 64 * 1024 * 1024}) as tool:
        result = tool.exec(["python", "-c", bomb])
    assert result.limits_hit == ["memory"], result.stderr
    assert result.exit_code != 0
    assert result.python is not None
    assert result.python["memory_bytes_at_end"] <= 64 * 1024 * 1024


def test_wall_time_by_epoch(tree: Path, state: Path) -> None:
    with tool_for(tree, state, {"wall_seconds": 1}) as tool:
        result = tool.exec(["python", "-c", "while True: pass"])
    assert result.limits_hit == ["time"]
    assert result.python is not None and "interrupt" in result.python["trap"]


def test_deep_recursion_ends_inside_the_guest(tool: ExecTool) -> None:
    code = "import sys\nsys.setrecursionlimit(10**7)\ndef f(n): return f(n + 1)\nf(0)"
    result = tool.exec(["python", "-c", code])
    assert result.exit_code not in (0, None)
    assert result.python is not None and "runtime_failed" not in result.python


def test_halt_kills_the_runtime(tool: ExecTool) -> None:
    result = tool.exec(["python", "-c", "while True: pass"], window=0.5)
    assert result.outcome == "backgrounded" and result.handle is not None
    halted = tool.halt(result.handle)
    assert halted.exit_code == 137 and halted.killed


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["ls", "-la"], "ls"),
        (["python", "-m", "http.server"], "-m"),
        (["python"], "python"),
        (["python", "../outside.py"], "../outside.py"),
    ],
)
def test_refused_commands_name_why(tool: ExecTool, argv: list[str], names: str) -> None:
    result = tool.exec(argv)
    assert result.outcome == "exceptional"
    assert result.code is ErrorCode.TOOL_UNAVAILABLE
    assert names in (result.subject or "")


def test_where_host_is_refused(tool: ExecTool) -> None:
    result = tool.exec(["python", "-c", "pass"], where="host")
    assert result.code is ErrorCode.SANDBOX_DENIED
    assert "no host form" in (result.detail or "")


def test_the_cache_is_private_verified_and_reused(tool: ExecTool, state: Path) -> None:
    assert tool.exec(["python", "-c", "pass"]).exit_code == 0
    (entry,) = (state / "wasm-cache").iterdir()
    module = entry / "module.cwasm"
    st = module.stat()
    assert stat.S_IMODE(entry.stat().st_mode) == 0o700
    assert stat.S_IMODE(st.st_mode) & 0o077 == 0
    recorded = (entry / "module.sha256").read_text().strip()
    assert hashlib.sha256(module.read_bytes()).hexdigest() == recorded
    assert tool.exec(["python", "-c", "pass"]).exit_code == 0
    assert module.stat().st_ino == st.st_ino  # mapped again, not compiled again


def test_a_tampered_cache_is_refused(
    tool: ExecTool, tree: Path, tmp_path: Path, state: Path
) -> None:
    assert tool.exec(["python", "-c", "pass"]).exit_code == 0  # the module's cache exists
    own = tmp_path / "own-state"
    own.mkdir(mode=0o700)
    # a copy of the module's cache: compiling it again would cost seconds
    shutil.copytree(state / "wasm-cache", own / "wasm-cache")
    (entry,) = (own / "wasm-cache").iterdir()
    module = entry / "module.cwasm"
    with tool_for(tree, own) as other:
        # verified once by this tool's arm, then changed in place under it: checked again
        assert other.exec(["python", "-c", "print('ran')"]).stdout.strip() == "ran"
        with module.open("r+b") as f:
            f.seek(module.stat().st_size // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        result = other.exec(["python", "-c", "print('ran')"])
    assert result.code is ErrorCode.SANDBOX_DENIED, result.stderr
    assert "failed its check" in (result.detail or "")
    assert "ran" not in (result.stdout or "")
    with pytest.raises(SprawlError) as err:
        wasi_module.open_verified(
            wasi_module.Compiled(module, (entry / "module.sha256").read_text().strip())
        )
    assert err.value.code is ErrorCode.SANDBOX_DENIED


def test_a_binary_with_another_hash_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "python.wasm"
    fake.write_bytes(b"\0asm\1\0\0\0")
    with pytest.raises(SprawlError) as err:
        wasi_module.verified_binary(fake)
    assert err.value.code is ErrorCode.SANDBOX_DENIED
    assert wasi_module.PINNED_SHA256 in err.value.detail
    assert hashlib.sha256(fake.read_bytes()).hexdigest() in err.value.detail
