"""The GitHub Action's steps after install (action.yml at the repository root runs them).

Standard library only, run by the venv's interpreter that install.sh made. Every input arrives
as an environment variable (`SPRAWL_ACTION_*`), never interpolated into a `run:` line: a
workflow input is text someone else shaped (a pull request's title, a matrix value), and
`${{ inputs.x }}` inside a script is zizmor's `template-injection`.

    python action.py prepare   the config the command runs under, and the image built and pinned
    python action.py run       the command, confined; outputs, job summary, artifact files;
                               exits with the command's status (sprawl-orch's own: 124 window,
                               125 refused, 128+N signal)

What the GitHub runner runs is what `.ci/run` runs here (tests/integration/test_action.py, as a
non-root account): the runner's variables (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, RUNNER_TEMP)
are plain files and directories.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

ARMS = ("auto", "container", "native", "copied_tree")
ENGINES = ("auto", "docker", "podman")
RECIPES = ("busybox", "debian", "python")
AXES = ("filesystem", "network", "process_tree", "user", "resources")
# A tag of our own for a --dockerfile build, so the pin names exactly what was just built.
DOCKERFILE_TAG = "sprawl-action/image:latest"
# A local image reference as docker and podman spell one (name[:tag][@digest] or an ID): the
# value is passed as one argv item, so this only turns a typo into a clear message early.
IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$")


class InputError(Exception):
    """An input the action can't use: the message names it and says what to give instead."""


def _input(name: str) -> str:
    return os.environ.get(f"SPRAWL_ACTION_{name.upper()}", "").strip()


def _seconds(given: str) -> str:
    # sprawl-orch's --timeout range check lets `nan` through (nan <= 0 is false), and then no
    # window is kept at all; `inf` ends in E_INTERNAL. A finite positive number or nothing.
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"input 'timeout' is {given!r}: give a positive number of seconds")
    return repr(value)


def _state_dir() -> Path:
    root = os.environ.get("SPRAWL_ACTION_STATE") or os.path.join(
        os.environ.get("RUNNER_TEMP") or "/tmp", "sprawl-orch-action"
    )
    path = Path(root)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _choice(name: str, allowed: tuple[str, ...]) -> str:
    value = _input(name) or "auto"
    if value not in allowed:
        raise InputError(f"input {name!r} is {value!r}: give one of {', '.join(allowed)}")
    return value


def _sprawl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # The venv's console script beside this interpreter: PATH is the caller's, and the runner's
    # PATH may hold another sprawl-orch (a pipx one) of another version.
    exe = Path(sys.executable).with_name("sprawl-orch")
    return subprocess.run([str(exe), *args], cwd=cwd, text=True, capture_output=True)


def config_path() -> Path:
    """The config file the command runs under: the caller's `config` input inside
    working-directory, else one this action writes from the `arm` and `engine` inputs into its
    state directory."""
    given = _input("config")
    if given:
        return _inside_tree("config", given)
    return _state_dir() / "sprawl.toml"


def _inside_tree(name: str, given: str) -> Path:
    # The file is read (and the config printed to the log) as the runner's account: a symlink
    # in the repository under test, or `..`, would otherwise hand it the runner's own files
    # (a sprawl.toml -> ~/.docker/config.json was printed whole before this check).
    tree = workdir()
    path = (tree / given).resolve()
    if not path.is_relative_to(tree):
        raise InputError(
            f"input {name!r} is {given!r}: it resolves to {str(path)!r}, outside "
            f"working-directory {str(tree)!r}; give a file inside that tree (no symlink out of it)"
        )
    return path


def workdir() -> Path:
    given = _input("working_directory") or "."
    path = Path(given).resolve()
    # A relative working-directory names a tree in the checkout (the step's directory): the
    # repository under test could make it a symlink to the runner's home, and the command would
    # run in a copy of that. An absolute path is the workflow author's own choice.
    if not Path(given).is_absolute() and not path.is_relative_to(Path.cwd().resolve()):
        raise InputError(
            f"input 'working-directory' is {given!r}: it resolves to {str(path)!r}, outside "
            "the checkout; give a directory inside it (no symlink out), or an absolute path"
        )
    if not path.is_dir():
        raise InputError(f"input 'working-directory' is {str(path)!r}: not a directory")
    return path


def prepare() -> None:
    arm = _choice("arm", ARMS)
    engine = _choice("engine", ENGINES)
    config = config_path()
    if _input("config"):
        if not config.is_file():
            raise InputError(f"input 'config' names {str(config)!r}: no such file")
        if arm != "auto" or engine != "auto":
            # The config is the caller's file: rewriting its tables would change their checkout.
            raise InputError(
                "inputs 'arm'/'engine' are set together with 'config': set [sandbox] arm and "
                "[sandbox.container] engine in that file instead, or leave 'config' empty"
            )
    else:
        # Only values from the fixed lists above reach the file: nothing else to quote.
        config.write_text(f'[sandbox]\narm = "{arm}"\n\n[sandbox.container]\nengine = "{engine}"\n')
    _image(config, engine)
    print(f"sprawl-orch action: config {config}")
    _log(config.read_text())


def _image(config: Path, engine: str) -> None:
    image, dockerfile = _input("image"), _input("dockerfile")
    if image and dockerfile:
        raise InputError("inputs 'image' and 'dockerfile' are both set: give one")
    engine_args = [] if engine == "auto" else ["--engine", engine]
    if dockerfile:
        path = _inside_tree("dockerfile", dockerfile)
        if not path.is_file():
            raise InputError(f"input 'dockerfile' names {str(path)!r}: no such file")
        _must(
            _sprawl(
                "image", "build", "--dockerfile", str(path), "--tag", DOCKERFILE_TAG, *engine_args
            )
        )
        ref = DOCKERFILE_TAG
    elif image in RECIPES:
        _must(_sprawl("image", "build", image, *engine_args))
        ref = f"sprawl/{image}:latest"
    elif image:
        if not IMAGE_REF.match(image):
            raise InputError(
                f"input 'image' is {image!r}: not a recipe ({', '.join(RECIPES)}) "
                "or a local image reference"
            )
        ref = image
    else:
        return
    pin_engines = ["docker", "podman"] if engine == "auto" else [engine]
    for name in pin_engines:
        done = _sprawl("image", "pin", ref, "--engine", name, "--config", str(config))
        # `auto` pins in every engine that has the image; an engine without it is not an error
        # (the arm's admission says which engine it used).
        if done.returncode != 0 and engine != "auto":
            _must(done)
        _log(done.stdout + done.stderr)


def _log(text: str) -> None:
    """Text someone else shaped (the command's output, a Dockerfile's RUN output, the caller's
    config) into the step's log, where the runner would obey a `::add-mask::`, `::error ...::`,
    `::set-output` or `##[...]` line in it as a workflow command. `::stop-commands::` with a
    token made after that text exists turns them off until the token comes back. One stream
    (stdout) for all of it: the runner reads stdout and stderr on separate readers, so a stop
    line on one stream does not order lines on the other."""
    if not text:
        return
    token = secrets.token_hex(16)
    end = "" if text.endswith("\n") else "\n"
    sys.stdout.write(f"::stop-commands::{token}\n{text}{end}::{token}::\n")
    sys.stdout.flush()


def _must(done: subprocess.CompletedProcess[str]) -> None:
    _log(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(done.returncode)


def run() -> int:
    command = _input("command")
    if not command:
        raise InputError("input 'command' is empty: give the shell line to run confined")
    args = ["exec", "--json", "--config", str(config_path())]
    window = _input("timeout")
    if window:
        args += ["--timeout", _seconds(window)]
    done = _sprawl(*args, "--shell", "--", command, cwd=workdir())
    out = _state_dir() / "artifacts"
    out.mkdir(exist_ok=True)
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        # Not a result (a usage error, status 2): show what sprawl-orch said and end with it.
        _log(done.stdout + done.stderr)
        _outputs({"status": str(done.returncode)})
        return done.returncode
    _log(done.stderr)
    _replay(result)
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    _changes(result, out)
    confinement = result.get("confinement") or {}
    assurances = confinement.get("assurances") or {}
    _outputs(
        {
            "status": str(done.returncode),
            "arm": str(result.get("arm") or ""),
            "result": str(out / "result.json"),
            "artifacts": str(out),
            "artifact-name": _artifact_name(),
            **{axis.replace("_", "-"): str(assurances.get(axis, "")) for axis in AXES},
        }
    )
    _summary(result, done.returncode)
    return done.returncode


def _replay(result: dict[str, Any]) -> None:
    """The command's own output into the step's log: the full text where the result cut it."""
    for stream in ("stdout", "stderr"):
        full = result.get(f"{stream}_full")
        text = Path(full).read_text(errors="replace") if full and Path(full).is_file() else None
        _log(text if text is not None else str(result.get(stream) or ""))


def _changes(result: dict[str, Any], out: Path) -> None:
    changes = result.get("changes") or {}
    handle = changes.get("handle")
    if not handle or not changes.get("total"):
        return
    diff = _sprawl("apply", str(handle), "--dry-run", "-C", str(workdir()))
    (out / "changes.diff").write_text(diff.stdout + diff.stderr)


def _artifact_name() -> str:
    given = _input("artifact_name")
    if given:
        return given
    job = re.sub(r"[^A-Za-z0-9_.-]", "-", os.environ.get("GITHUB_JOB", "job"))
    # Two uses in one job (or a matrix) must not collide: upload-artifact refuses a taken name.
    return f"sprawl-orch-{job}-{secrets.token_hex(4)}"


def _outputs(values: dict[str, str]) -> None:
    target = os.environ.get("GITHUB_OUTPUT")
    lines = "".join(
        f"{key}={value.splitlines()[0] if value else ''}\n" for key, value in values.items()
    )
    if target:
        with open(target, "a", encoding="utf-8") as sink:
            sink.write(lines)
    else:
        print(lines, end="")


def _cell(text: str) -> str:
    # A table cell: a pipe or a line break in the statement would end the cell or the table;
    # `<`, `&` and backticks would let a detail open HTML (`<details>`, `<!--`) or a code span
    # that swallows the words after it.
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace("`", "&#96;")
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _code(text: str) -> str:
    """A code span that holds all of `text`: a command is attacker-shaped, and one backtick in
    it closed the old single-backtick span, so the rest (`→ status **0** under **container**`)
    rendered as the summary's own words. The fence is one longer than the longest backtick run
    inside (CommonMark's rule); spaces pad it so a leading or trailing backtick stays content."""
    flat = text.replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    return f"{fence} {flat} {fence}"


def _summary(result: dict[str, Any], status: int) -> None:
    confinement = result.get("confinement") or {}
    assurances = confinement.get("assurances") or {}
    rows = [
        "### sprawl-orch",
        "",
        f"{_code(' '.join(result.get('command') or []))} → status **{status}** "
        f"({_cell(str(result.get('outcome')))}) under **{_cell(str(result.get('arm')))}**",
        "",
        "| guarantee | held |",
        "|---|---|",
        *(f"| {axis} | {_cell(str(assurances.get(axis, '?')))} |" for axis in AXES),
        "",
    ]
    if result.get("code"):
        detail = _cell(str(result.get("detail") or ""))
        rows += [f"Refused: {_code(str(result['code']))} — {detail}", ""]
    statement = confinement.get("statement")
    if statement:
        rows += [f"> {_cell(str(statement))}", ""]
    text = "\n".join(rows) + "\n"
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as sink:
            sink.write(text)
    else:
        print(text, end="")


def main(argv: list[str]) -> int:
    step = argv[1] if len(argv) == 2 else ""
    try:
        if step == "prepare":
            prepare()
            return 0
        if step == "run":
            return run()
    except InputError as err:
        print(f"sprawl-orch action: {err}", file=sys.stderr)
        return 2
    print("usage: action.py prepare|run", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
