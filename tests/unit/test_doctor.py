"""Doctor's report from described machines: one row per arm, what auto picks and why, the
shell, pwsh and the cgroup line (design §13)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from sprawl_orch.cli import main
from sprawl_orch.config import parse_config
from sprawl_orch.core.arms import image_not_local
from sprawl_orch.core.engine_offer import EngineOffer
from sprawl_orch.core.shell import Absent, Found, Missing
from sprawl_orch.runs.cgroups import NOT_DELEGATED_PHRASE, Delegation, PlatformShares
from sprawl_orch.selection.doctor import DoctorReport, doctor_report
from sprawl_orch.selection.offerings import Offerings

SCRATCH = Path("/tmp/sprawl-orch")
DOCKER = EngineOffer(
    "docker",
    admitted=True,
    detail="docker 20.10 (cgroup v1); runs under runc",
    image="sha256:" + "a" * 64,
)
DOCKER_ROOTLESS = EngineOffer(
    "docker",
    admitted=True,
    detail="rootless docker",
    image="sha256:" + "a" * 64,
    uids_namespaced=True,
)
PODMAN_REFUSED = EngineOffer(
    "podman",
    admitted=False,
    detail="crun: cgroups in hybrid mode not supported",
    recovery="install runc",
)
NOT_DELEGATED = Delegation(PlatformShares.NONE, None, why=NOT_DELEGATED_PHRASE + " (read-only)")
V1 = Delegation(PlatformShares.CPU_AND_MEMORY, "v1", why="cgroup v1: writable cpu, memory")


def resolver(shell: object = None, pwsh: object = None):  # type: ignore[no-untyped-def]
    def resolve(enabled: bool, interpreter: str, environ: object) -> object:
        if not enabled:
            return Absent()
        if interpreter == "pwsh" and pwsh is not None:
            return pwsh
        if interpreter == "pwsh":
            return Missing("pwsh", "no pwsh on the search path")
        return shell or Found("/bin/sh", "sh")

    return resolve


def report(offerings: Offerings, delegation: Delegation = V1, **sandbox: object) -> DoctorReport:
    config = parse_config({"sandbox": dict(sandbox)})
    return doctor_report(offerings, config, delegation, {}, resolver())


def linux(**kw: object) -> Offerings:
    base: dict[str, object] = {
        "platform": "linux",
        "scratch": SCRATCH,
        "bwrap": "/usr/bin/bwrap",
        "user_namespace": True,
        "user_namespace_why": "ok",
        "engines": (DOCKER, PODMAN_REFUSED),
        "nice": "/usr/bin/nice",
    }
    base.update(kw)
    return Offerings(**base)  # type: ignore[arg-type]


def test_one_row_per_engine_native_and_copied_tree() -> None:
    rows = report(linux()).arms
    assert [r.label for r in rows] == [
        "container (docker)",
        "container (podman)",
        "linux_namespaces",
        "landlock",
        "python",
        "copied_tree",
    ]
    # linux()'s kernel has no Landlock (landlock_abi 0); python: this described machine says
    # nothing of its runtime ("not examined")
    assert [r.available for r in rows] == [True, False, True, False, False, True]


def test_the_python_row_from_its_runtime() -> None:
    rows = {r.label: r for r in report(replace(linux(), python_missing=None)).arms}
    assert rows["python"].available
    assert rows["python"].assurances == {
        "filesystem": "yes",
        "network": "yes",
        "process_tree": "yes",
        "user": "no",
        "resources": "yes",
    }
    gone = replace(linux(), python_missing="the wasmtime package is not installed")
    row = {r.label: r for r in report(gone).arms}["python"]
    assert not row.available
    assert "wasmtime" in row.missing[0].phrase and "sprawl-orch[python]" in row.missing[0].recovery


def test_the_python_row_says_which_compiler_the_next_command_runs_on(tmp_path: Path) -> None:
    from sprawl_orch.native_fallbacks import wasi_module

    config = parse_config({"state": {"dir": str(tmp_path)}})

    def detail() -> str:
        found = doctor_report(replace(linux(), python_missing=None), config, V1, {}, resolver())
        return {r.label: r for r in found.arms}["python"].detail

    assert "python.compiler: none compiled yet" in detail()
    assert not (tmp_path / "wasm-cache").exists()  # doctor only looks
    for compiler in ("winch", "cranelift"):  # an entry's record, as a compile leaves it
        key = wasi_module.cache_key(wasi_module.PINNED_SHA256, compiler)
        (tmp_path / "wasm-cache" / key).mkdir(parents=True)
        (tmp_path / "wasm-cache" / key / "module.sha256").write_text("0" * 64 + "\n")
        assert f"python.compiler: {compiler} " in detail()
    assert "background compile" not in detail()


def test_rows_carry_the_five_axes_of_their_arm() -> None:
    rows = {r.label: r for r in report(linux()).arms}
    assert rows["container (docker)"].assurances == {
        "filesystem": "yes",
        "network": "yes",
        "process_tree": "yes",
        "user": "no",
        "resources": "yes",
    }
    # bwrap keeps the user axis only for a root caller, whose bwrap drops to a uid of its own.
    assert rows["linux_namespaces"].assurances["user"] == ("yes" if os.geteuid() == 0 else "no")
    # The copied tree cannot put its copy at the tree's path: no axis is kept.
    assert rows["copied_tree"].assurances == {
        "filesystem": "no",
        "network": "no",
        "process_tree": "no",
        "user": "no",
        "resources": "no",
    }
    assert rows["copied_tree"].statement.startswith(
        "Runs under copied_tree: writes can reach your working directory"
    )


def test_user_axis_follows_the_engines_uid_mapping() -> None:
    rows = report(linux(engines=(DOCKER_ROOTLESS,))).arms
    assert rows[0].assurances["user"] == "yes"


def test_an_unavailable_row_says_what_is_missing_and_what_to_do() -> None:
    podman = {r.label: r for r in report(linux()).arms}["container (podman)"]
    assert not podman.available
    assert "crun: cgroups in hybrid mode not supported" in podman.missing[0].phrase
    assert podman.missing[0].recovery

    native = {r.label: r for r in report(linux(bwrap=None)).arms}["linux_namespaces"]
    assert not native.available
    assert native.missing[0].kind == "namespace_wrapper"
    assert "apt-get install bubblewrap" in native.missing[0].recovery


def test_a_missing_image_is_named_with_its_build_command() -> None:
    engine = EngineOffer(
        "docker",
        admitted=False,
        detail="image missing",
        image_missing=image_not_local("docker", "sha256:" + "c" * 64),
    )
    docker = report(linux(engines=(engine,))).arms[0]
    assert docker.missing[0].kind == "image_not_local"
    assert "sprawl-orch image build" in docker.missing[0].recovery


def test_auto_says_where_it_went_and_why() -> None:
    picked = report(linux()).auto
    assert (picked.arm, picked.engine) == ("container", "docker")
    down = report(linux(engines=(PODMAN_REFUSED,)), arm="copied_tree")
    assert down.auto.arm == "linux_namespaces"
    assert "podman: crun" in down.auto.reason and "docker: not examined" in down.auto.reason
    assert down.configured.asked == "copied_tree" and down.configured.arm == "copied_tree"


def test_an_explicit_arm_that_is_missing_is_reported_unavailable() -> None:
    r = report(linux(bwrap=None), arm="native")
    assert r.configured.arm == "unavailable"
    assert r.configured.missing[0].kind == "namespace_wrapper"


@pytest.mark.parametrize(
    ("platform", "label"),
    [
        ("darwin", "macos_seatbelt"),
        ("win32", "windows_job"),
        ("freebsd14", "native"),
    ],
)
def test_the_native_row_is_the_platforms(platform: str, label: str) -> None:
    rows = report(Offerings(platform=platform, scratch=SCRATCH)).arms
    assert rows[2].label == label and not rows[2].available


def test_shell_and_pwsh_rows() -> None:
    config = parse_config({})
    r = doctor_report(
        linux(), config, V1, {}, resolver(pwsh=Found("/opt/microsoft/powershell/7/pwsh", "pwsh"))
    )
    assert (r.shell.state, r.shell.interpreter) == ("found", "sh")
    assert (r.pwsh.state, r.pwsh.program) == ("found", "/opt/microsoft/powershell/7/pwsh")
    missing = report(linux())
    assert missing.pwsh.state == "missing" and "no pwsh" in missing.pwsh.detail
    off = report(linux(), shell=False)
    assert off.shell.state == "absent"


def test_cgroup_line_says_when_runs_compete() -> None:
    r = report(linux(), NOT_DELEGATED)
    assert r.cgroup.delegated is False
    assert (
        "runs' commands compete thread by thread and run below the core: the cgroup is "
        "not delegated"
    ) in r.cgroup.detail
    assert report(linux(), V1).cgroup.delegated is True


def test_no_scratch_makes_every_sandbox_arm_unavailable() -> None:
    r = report(linux(scratch=None, scratch_problem="/tmp/sprawl-orch: not writable"))
    assert not any(row.available for row in r.arms)
    assert r.auto.arm == "unavailable" and r.scratch is None


def test_cli_json_is_the_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sprawl_orch.container.offer as offer

    monkeypatch.setattr(offer, "offer_engines", lambda config, every=False: (PODMAN_REFUSED,))
    config = tmp_path / "sprawl.toml"
    config.write_text('[sandbox]\narm = "copied_tree"\n')
    result = CliRunner().invoke(main, ["doctor", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [row["label"] for row in data["arms"]][:2] == [
        "container (docker)",
        "container (podman)",
    ]
    assert data["configured"]["arm"] == "copied_tree"
    assert set(data) >= {"arms", "auto", "configured", "shell", "pwsh", "cgroup", "scratch"}


def test_cli_table_names_every_arm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sprawl_orch.container.offer as offer

    monkeypatch.setattr(offer, "offer_engines", lambda config, every=False: (PODMAN_REFUSED,))
    config = tmp_path / "sprawl.toml"
    config.write_text("[sandbox]\n")
    # Wide enough that rich does not wrap a phrase across lines.
    result = CliRunner().invoke(main, ["doctor", "--config", str(config)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in (
        "container (docker)",
        "container (podman)",
        "copied_tree",
        "auto →",
        "cgroup",
        "pwsh",
        "crun: cgroups in hybrid mode not supported",
    ):
        assert text in result.output


def test_cli_refuses_a_bad_config(tmp_path: Path) -> None:
    config = tmp_path / "sprawl.toml"
    config.write_text('[sandbox]\narm = "docker"\n')
    result = CliRunner().invoke(main, ["doctor", "--config", str(config)])
    assert result.exit_code == 125
    assert "E_CONFIG_INVALID" in result.output


def test_an_engine_the_config_does_not_name_is_not_examined_and_not_install_advice() -> None:
    # engine = "podman": docker is not sampled; its row said "install docker.io" beside a
    # running docker (issue 27, item 12).
    podman = EngineOffer("podman", admitted=True, detail="podman 4.3", image="sha256:" + "b" * 64)
    result = report(linux(engines=(podman,)), container={"engine": "podman"})
    docker = next(r for r in result.arms if r.label == "container (docker)")
    assert not docker.available
    assert [m.phrase for m in docker.missing] == [
        'not examined: the config names [sandbox.container] engine = "podman"'
    ]
    assert "apt-get install" not in json.dumps([m.recovery for m in docker.missing])
