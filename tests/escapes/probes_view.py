"""View-widening inputs (issue 30): files in the tree, entries of the caller's PATH and names
of its environment that shape what the native view binds. Each scenario plants its input,
then one command reads secrets the input would expose -- by absolute path, so that the raw
control always reads them -- and the host judges: a scenario escaped when one of its
secrets' markers is in the command's output.

The secrets live in a home of the bait's own, /home/esc-view-TOK (0700, files 0644: for a
root caller only the sandbox uid's ACL entries could open the way), which the run hands the
exec tool as the *caller's* HOME: issue 30's PATH break compared against the command's HOME
(/tmp) instead. Scenarios whose input is refused (a venv whose home is not its
interpreter's) are blocked when the command is refused with E_SANDBOX_DENIED.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sprawl_orch.core.assurances import Guarantee
from tests.escapes.probe import Probe

CLS = "view-widening inputs"


@dataclass(frozen=True)
class Scenario:
    id: str
    reads: tuple[str, ...]  # files to cat, dirs to list (absolute)
    markers: tuple[str, ...]  # any of them in the output: escaped
    tree: Callable[[Path], None] = lambda tree: None  # plants the tree's input
    path: tuple[str, ...] = ()  # entries put before the caller's PATH
    env: dict[str, str] = field(default_factory=dict)  # passed by env_passthrough

    def probe(self) -> Probe:
        return Probe(self.id, CLS, Guarantee.FILESYSTEM, self.sh())

    def sh(self) -> str:
        # cat for files, ls for dirs; nothing of the script's own text names a marker
        reads = " ".join(f"'{r}'" for r in self.reads)
        return (
            f'for p in {reads}; do if [ -d "$p" ]; then ls -a "$p"; else cat "$p"; fi; '
            f'done 2>/dev/null; echo "NOT {self.id} (judged by the host)"'
        )

    def seen(self, out: str) -> str | None:
        hit = [m for m in self.markers if m in out]
        return f"the host's secret {hit[0]!r} is in the output" if hit else None


class ViewBait:
    """The bait's home with its secrets, a /tmp directory, a link to the home."""

    def __init__(self, root: Path, state: Path) -> None:
        self.tok = secrets.token_hex(4)
        self.root, self.state = root, state
        # root: a home beside the accounts' in /home; an account (the non-root run): one
        # inside its own $HOME, which that run puts under /home too
        base = Path("/home") if os.geteuid() == 0 else Path.home()
        self.home = base / f"esc-view-{self.tok}"
        self.tmpd = Path(f"/tmp/esc-view-{self.tok}")
        self.made: list[Path] = []

    def secret(self, path: Path, name: str) -> str:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = f"viewsecret-{name}-{self.tok}"
        path.write_text(marker + "\n")
        path.chmod(0o644)
        return marker

    def plant(self) -> None:
        self.home.parent.mkdir(exist_ok=True)
        self.home.mkdir(mode=0o700)
        self.made += [self.home, self.tmpd]
        h = self.home
        self.m = {
            "ssh": self.secret(h / ".ssh" / "id_ed25519", "ssh"),
            "aws": self.secret(h / ".aws" / "credentials", "aws"),
            "cargo": self.secret(h / ".cargo" / "credentials.toml", "cargo"),
            "state": self.secret(h / ".local/state/sprawl-orch/kept-output/o.out", "state"),
            "keyring": self.secret(h / ".local/share/keyrings/login.keyring", "keyring"),
            "kept": self.secret(self.state / "kept-output" / f"other-{self.tok}.out", "kept"),
            "tmp": self.secret(self.tmpd / "bin" / "secret", "tmp"),
            "rel": self.secret(self.root / f"view-rel-{self.tok}" / "secret", "rel"),
            # not in the guard's list of secret places: a tool's root and a token file
            "pulumi": self.secret(h / ".pulumi" / "credentials.json", "pulumi"),
            "kaggle": self.secret(h / ".kaggle" / "kaggle.json", "kaggle"),
        }
        if os.geteuid() == 0:
            # a closed directory that is no account's home: only an ACL entry would open it
            self.closed = Path(f"/home/esc-closed-{self.tok}")
            self.closed.mkdir(mode=0o700)
            self.made.append(self.closed)
            self.m["closed"] = self.secret(self.closed / "tools" / "secret", "closed")
            (self.closed / "tools" / "bin").mkdir()
        for d in (".cargo/bin", ".local/bin", ".pulumi/bin"):
            (h / d).mkdir(parents=True, exist_ok=True)
        (h / ".pulumi/bin/pulumi").write_text("#!/bin/sh\n")
        (h / ".pulumi/bin/pulumi").chmod(0o755)
        planted = h / ".ssh" / "python3"  # an "interpreter" where the view never reaches
        planted.write_text("#!/bin/sh\n")
        planted.chmod(0o755)
        (self.root / f"homelink-{self.tok}").symlink_to(h)
        (self.root / f"awslink-{self.tok}").symlink_to(h / ".aws")

    def close(self) -> None:
        for p in self.made:
            shutil.rmtree(p, ignore_errors=True)


def _python() -> str:
    return os.path.realpath(sys.executable)


def _venv(name: str, home: str, interpreter: str) -> Callable[[Path], None]:
    def plant(tree: Path) -> None:
        (tree / name / "bin").mkdir(parents=True)
        (tree / name / "pyvenv.cfg").write_text(f"home = {home}\nversion = 3\n")
        (tree / name / "bin" / "python3").symlink_to(interpreter)

    return plant


def pyenv_shims() -> Path | None:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    return root / "shims" if (root / "libexec" / "pyenv").is_file() else None


def scenarios(b: ViewBait) -> list[Scenario]:
    h, m, tok = b.home, b.m, b.tok
    aws = (str(h / ".aws" / "credentials"),)
    out = [
        # break 1: the tree's pyvenv.cfg
        Scenario(
            "venv-home-ssh",
            (str(h / ".ssh" / "id_ed25519"),),
            (m["ssh"],),
            _venv(".venv", str(h / ".ssh"), _python()),
        ),
        Scenario(
            "venv-home-agrees-with-planted-python",
            (str(h / ".ssh" / "id_ed25519"),),
            (m["ssh"],),
            _venv("venv", str(h / ".ssh"), str(h / ".ssh" / "python3")),
        ),
        Scenario(
            # the bait's home is not on the way to the copy's mount point, whose skeleton
            # directories bwrap makes (empty) whatever the view
            "venv-home-lists-homes",
            ("/home", str(h.parent)),
            (h.name,),
            _venv(".venv", "/home", _python()),
        ),
        Scenario(
            "venv-home-kept-output",
            (str(b.state / "kept-output" / f"other-{tok}.out"),),
            (m["kept"],),
            _venv(".venv", str(b.state / "kept-output"), _python()),
        ),
        Scenario(
            "venv-home-through-link",
            aws,
            (m["aws"],),
            _venv("env", str(b.root / f"awslink-{tok}"), _python()),
        ),
        # break 2: the caller's PATH
        Scenario(
            "path-cargo-root",
            (str(h / ".cargo/credentials.toml"),),
            (m["cargo"],),
            path=(str(h / ".cargo/bin"),),
        ),
        Scenario(
            "path-local-root",
            (
                str(h / ".local/state/sprawl-orch/kept-output/o.out"),
                str(h / ".local/share/keyrings/login.keyring"),
            ),
            (m["state"], m["keyring"]),
            path=(str(h / ".local/bin"),),
        ),
        Scenario(
            "path-secret-dir", (str(h / ".ssh/id_ed25519"),), (m["ssh"],), path=(str(h / ".ssh"),)
        ),
        Scenario(
            "path-link-to-home",
            (*aws, str(h)),
            (m["aws"], ".aws"),
            path=(str(b.root / f"homelink-{tok}"),),
        ),
        Scenario("path-dotdot", aws, (m["aws"],), path=(f"{h}/.cargo/bin/../../.aws",)),
        Scenario(
            "path-in-tmp",
            (str(b.tmpd / "bin" / "secret"),),
            (m["tmp"],),
            path=(str(b.tmpd / "bin"),),
        ),
        Scenario(
            "path-in-tree-link",
            aws,
            (m["aws"],),
            lambda tree: (tree / "tools").symlink_to(h / ".aws"),
            path=("@TREE@/tools",),
        ),
        Scenario(
            "path-relative",
            (str(b.root / f"view-rel-{tok}" / "secret"),),
            (m["rel"],),
            path=(f"../view-rel-{tok}", f"view-rel-{tok}"),
        ),
        Scenario(
            "path-tree-parent",
            (str(b.root / f"view-rel-{tok}" / "secret"), str(b.state / "kept-output")),
            (m["rel"], m["kept"]),
            path=("@TREE@/..",),
        ),
        Scenario(
            "path-state-kept-output",
            (str(b.state / "kept-output" / f"other-{tok}.out"),),
            (m["kept"],),
            path=(str(b.state / "kept-output"),),
        ),
        # attack3: what the guard's list of secret places does not name
        Scenario(
            # pulumi's installer puts ~/.pulumi/bin on PATH; ~/.pulumi holds credentials.json
            "path-tool-root-holds-credentials",
            (str(h / ".pulumi/credentials.json"),),
            (m["pulumi"],),
            path=(str(h / ".pulumi/bin"),),
        ),
        Scenario(
            "path-home-child-dir",
            (str(h / ".kaggle/kaggle.json"),),
            (m["kaggle"],),
            path=(str(h / ".kaggle"),),
        ),
        Scenario(
            # home agrees with the realpath of the "interpreter": any file the tree links to
            "venv-python-links-any-file",
            (str(h / ".kaggle/kaggle.json"),),
            (m["kaggle"],),
            _venv(".venv", str(h / ".kaggle"), str(h / ".kaggle/kaggle.json")),
        ),
        Scenario(
            "venv-python-links-tool-root",
            (str(h / ".pulumi/credentials.json"),),
            (m["pulumi"],),
            _venv(".venv", str(h / ".pulumi/bin"), str(h / ".pulumi/bin/pulumi")),
        ),
        # names of the environment: none of them shapes the view
        Scenario(
            "env-library-and-venv-names",
            aws,
            (m["aws"],),
            env={
                "LD_LIBRARY_PATH": str(h / ".aws"),
                "PYTHONHOME": str(h / ".aws"),
                "VIRTUAL_ENV": str(h / ".aws"),
            },
        ),
    ]
    if "closed" in m:
        out.append(
            Scenario(
                "path-closed-dir-opened-by-acl",
                (str(b.closed / "tools" / "secret"),),
                (m["closed"],),
                path=(str(b.closed / "tools" / "bin"),),
            )
        )
    shims = pyenv_shims()
    if shims is not None:
        versions = shims.parent / "versions"
        up = os.path.relpath(h / ".aws", versions)
        out.append(
            Scenario(
                "python-version-traversal",
                aws,
                (m["aws"],),
                lambda tree: (tree / ".python-version").write_text(f"{up}\n../../..\n"),
                path=(str(shims),),
            )
        )
        out.append(
            Scenario(
                "pyenv-version-env-traversal",
                aws,
                (m["aws"],),
                path=(str(shims),),
                env={"PYENV_VERSION": up},
            )
        )
    return out
