"""The Windows arm's pure parts, on every platform: the start plan and its undo, the job's
limits, names, command line, environment block, and the Win32 structure layouts (checked
against the Windows x64 sizes). The real mechanism is proven on windows-latest."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from sprawl_orch.config import ContainerConfig
from sprawl_orch.core.arms import ASSURANCES, ArmName
from sprawl_orch.native_fallbacks import win32_api as api
from sprawl_orch.native_fallbacks.job_object import JobObjectArm, job_available
from sprawl_orch.native_fallbacks.job_plan import (
    CREATE_SUSPENDED,
    CREATION_FLAGS,
    EXTENDED_STARTUPINFO_PRESENT,
    JOB_OBJECT_CPU_RATE_CONTROL_ENABLE,
    JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP,
    JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    JOB_OBJECT_LIMIT_JOB_MEMORY,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    START_PLAN,
    Step,
    check_plan,
    command_line,
    environment_block,
    job_limits,
    profile_name,
    run_plan,
)

MiB = 1024 * 1024


def test_the_plan_assigns_before_it_resumes() -> None:
    check_plan(START_PLAN)
    order = list(START_PLAN)
    assert order.index(Step.CREATE_SUSPENDED) < order.index(Step.ASSIGN) < order.index(Step.RESUME)
    assert order.index(Step.LIMIT_JOB) < order.index(Step.CREATE_SUSPENDED)
    assert order[-1] is Step.RESUME


@pytest.mark.parametrize(
    "bad",
    [
        (
            Step.CREATE_JOB,
            Step.LIMIT_JOB,
            Step.GRANT_COPY,
            Step.CREATE_SUSPENDED,
            Step.RESUME,
            Step.ASSIGN,
        ),
        (
            Step.CREATE_JOB,
            Step.GRANT_COPY,
            Step.CREATE_SUSPENDED,
            Step.LIMIT_JOB,
            Step.ASSIGN,
            Step.RESUME,
        ),
        (Step.CREATE_JOB, Step.LIMIT_JOB, Step.CREATE_SUSPENDED, Step.ASSIGN, Step.RESUME),
    ],
)
def test_an_unsafe_plan_is_rejected(bad: tuple[Step, ...]) -> None:
    with pytest.raises(ValueError):
        check_plan(bad)


def recording(fail_at: Step | None = None) -> tuple[list[str], dict[Step, object]]:
    log: list[str] = []

    def action(step: Step) -> object:
        def act() -> object:
            if step is fail_at:
                raise OSError(5, f"{step.value} refused")
            log.append(step.value)
            return lambda: log.append(f"undo {step.value}")

        return act

    return log, {step: action(step) for step in Step}


def test_run_plan_runs_the_steps_in_order() -> None:
    log, actions = recording()
    run_plan(START_PLAN, actions)  # type: ignore[arg-type]
    assert log == [s.value for s in START_PLAN]


def test_a_failed_assignment_kills_the_suspended_process_and_never_resumes_it() -> None:
    log, actions = recording(fail_at=Step.ASSIGN)
    with pytest.raises(OSError, match="assign_to_job refused"):
        run_plan(START_PLAN, actions)  # type: ignore[arg-type]
    assert "resume" not in log
    # Undone newest first: the suspended process, then the grant, the limits, the job.
    assert log[log.index("create_suspended") + 1 :] == [
        "undo create_suspended",
        "undo grant_copy",
        "undo limit_job",
        "undo create_job",
    ]


def test_limits_come_from_the_container_settings() -> None:
    limits = job_limits(memory_bytes=512 * MiB, cpus=1.0, pids=256, cpu_count=2)
    assert limits.job_memory == 512 * MiB
    assert limits.active_processes == 256
    assert limits.cpu_rate == 5000  # one CPU of two: 50.00 % of the machine
    for flag in (
        JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
        JOB_OBJECT_LIMIT_JOB_MEMORY,
        JOB_OBJECT_LIMIT_ACTIVE_PROCESS,
    ):
        assert limits.limit_flags & flag
    assert (
        limits.cpu_flags
        == JOB_OBJECT_CPU_RATE_CONTROL_ENABLE | JOB_OBJECT_CPU_RATE_CONTROL_HARD_CAP
    )


@pytest.mark.parametrize(
    ("cpus", "count", "rate"),
    [
        (4.0, 2, 10_000),
        (0.5, 8, 625),
        (0.0001, 64, 1),
        (1.0, 1, 10_000),
    ],
)
def test_cpu_rate_is_clamped_to_what_windows_accepts(cpus: float, count: int, rate: int) -> None:
    assert job_limits(64 * MiB, cpus, 8, count).cpu_rate == rate


def test_process_is_created_suspended_with_extended_startup_info() -> None:
    assert CREATION_FLAGS & CREATE_SUSPENDED
    assert CREATION_FLAGS & EXTENDED_STARTUPINFO_PRESENT


def test_profile_names_are_valid_and_distinct() -> None:
    name = profile_name(123456, "0a1b2c3d")
    assert name == "sprawl-orch.123456.0a1b2c3d" and len(name) <= 64
    with pytest.raises(ValueError):
        profile_name(1, "x" * 64)
    with pytest.raises(ValueError):
        profile_name(1, "a/b")


def test_command_line_round_trips_through_the_msvc_rules() -> None:
    argv = ["C:\\Program Files\\Python\\python.exe", "-c", 'print("a b")', "tail\\"]
    line = command_line(argv)
    assert line == subprocess.list2cmdline(argv)
    assert line.startswith('"C:\\Program Files\\Python\\python.exe" -c')


def test_environment_block_is_sorted_and_double_terminated() -> None:
    block = environment_block({"path": "C:\\bin", "LANG": "C", "SYSTEMROOT": "C:\\Windows"})
    assert block == "LANG=C\0path=C:\\bin\0SYSTEMROOT=C:\\Windows\0\0"
    assert environment_block({}) == "\0"
    with pytest.raises(ValueError):
        environment_block({"A=B": "x"})


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="layouts are for 64-bit")
def test_structure_layouts_match_windows_x64() -> None:
    sizes = {
        api.JOBOBJECT_BASIC_LIMIT_INFORMATION: 64,
        api.IO_COUNTERS: 48,
        api.JOBOBJECT_EXTENDED_LIMIT_INFORMATION: 144,
        api.JOBOBJECT_CPU_RATE_CONTROL_INFORMATION: 8,
        api.STARTUPINFOW: 104,
        api.STARTUPINFOEXW: 112,
        api.PROCESS_INFORMATION: 24,
        api.SECURITY_CAPABILITIES: 24,
        api.TRUSTEE_W: 32,
        api.EXPLICIT_ACCESS_W: 48,
    }
    for struct, size in sizes.items():
        assert ctypes.sizeof(struct) == size, struct.__name__
    assert api.JOBOBJECT_EXTENDED_LIMIT_INFORMATION.JobMemoryLimit.offset == 120
    assert api.STARTUPINFOW.hStdInput.offset == 80


def test_the_arm_claims_all_five_axes() -> None:
    arm = JobObjectArm(ContainerConfig(memory_bytes=64 * MiB, cpus=1.0, pids=64), cpu_count=4)
    assert arm.name is ArmName.WINDOWS_JOB
    assert arm.assurances() == ASSURANCES[ArmName.WINDOWS_JOB]
    assert arm.limits.cpu_rate == 2500 and arm.limits.job_memory == 64 * MiB
    assert arm.profile.startswith("sprawl-orch.")


@pytest.mark.skipif(sys.platform == "win32", reason="elsewhere the sample says why not")
def test_job_is_unavailable_off_windows() -> None:
    ok, why = job_available()
    assert ok is False and "not Windows" in why
