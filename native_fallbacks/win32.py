"""The Win32 calls behind the `windows_job` arm (ctypes; no pywin32 needed).

Imported only on Windows (types and bindings: `native_fallbacks.win32_api`). Every call
that can fail is checked and turned into an OSError naming the call, and at the arm's
boundary into E_SANDBOX_DENIED: the command is refused, never run unconfined.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sprawl_orch.core.arms import job_leaf
from sprawl_orch.core.errors import ErrorCode, SprawlError
from sprawl_orch.native_fallbacks.job_plan import (
    CREATION_FLAGS,
    JobLimits,
    Step,
    Undo,
    command_line,
    environment_block,
    job_limits,
    run_plan,
)
from sprawl_orch.native_fallbacks.win32_api import (
    DACL_SECURITY_INFORMATION,
    DWORD,
    EXPLICIT_ACCESS_W,
    FILE_ALL_ACCESS,
    GRANT_ACCESS,
    HANDLE,
    HRESULT_ALREADY_EXISTS,
    INFINITE,
    JOBOBJECT_CPU_RATE_CONTROL_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
    PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES,
    PROCESS_INFORMATION,
    PVOID,
    SE_FILE_OBJECT,
    SECURITY_CAPABILITIES,
    SIZE_T,
    STARTF_USESTDHANDLES,
    STARTUPINFOEXW,
    SUB_CONTAINERS_AND_OBJECTS_INHERIT,
    TRUSTEE_IS_SID,
    TRUSTEE_IS_UNKNOWN,
    ULONG_PTR,
    WAIT_OBJECT_0,
    JobObjectBasicProcessIdList,
    JobObjectCpuRateControlInformation,
    JobObjectExtendedLimitInformation,
    libs,
    winerror,
)
from sprawl_orch.runs.launch import Finished, Launch

KILLED_EXIT = 1


def refuse(why: str) -> SprawlError:
    return SprawlError(
        ErrorCode.SANDBOX_DENIED,
        subject="windows_job",
        detail=f"an AppContainer inside a limited Job Object cannot be made here: {why}; the "
        "command is not run unconfined",
        recovery=job_leaf(why).recovery + ', or ask for where = "host"',
    )


# -- the job -------------------------------------------------------------------------
def new_job() -> int:
    job = libs()[0].CreateJobObjectW(None, None)
    if not job:
        raise winerror("CreateJobObjectW")
    return int(job)


def set_limits(job: int, limits: JobLimits) -> None:
    k32, _, _ = libs()
    ext = JOBOBJECT_EXTENDED_LIMIT_INFORMATION()
    ext.BasicLimitInformation.LimitFlags = limits.limit_flags
    ext.BasicLimitInformation.ActiveProcessLimit = limits.active_processes
    ext.JobMemoryLimit = limits.job_memory
    if not k32.SetInformationJobObject(
        job, JobObjectExtendedLimitInformation, ctypes.byref(ext), ctypes.sizeof(ext)
    ):
        raise winerror("SetInformationJobObject(extended limits)")
    cpu = JOBOBJECT_CPU_RATE_CONTROL_INFORMATION(limits.cpu_flags, limits.cpu_rate)
    if not k32.SetInformationJobObject(
        job, JobObjectCpuRateControlInformation, ctypes.byref(cpu), ctypes.sizeof(cpu)
    ):
        raise winerror("SetInformationJobObject(CPU rate)")


def job_pids(job: int, room: int = 1024) -> list[int]:
    k32, _, _ = libs()

    class IdList(ctypes.Structure):
        _fields_ = [
            ("NumberOfAssignedProcesses", DWORD),
            ("NumberOfProcessIdsInList", DWORD),
            ("ProcessIdList", ULONG_PTR * room),
        ]

    ids = IdList()
    if not k32.QueryInformationJobObject(
        job, JobObjectBasicProcessIdList, ctypes.byref(ids), ctypes.sizeof(ids), None
    ):
        return []
    return [int(ids.ProcessIdList[i]) for i in range(ids.NumberOfProcessIdsInList)]


# -- the AppContainer ----------------------------------------------------------------
class AppContainer:
    def __init__(self, name: str, sid: int) -> None:
        self.name = name
        self.sid = sid

    @classmethod
    def open(cls, name: str) -> AppContainer:
        _, userenv, _ = libs()
        sid = PVOID()
        hr = userenv.CreateAppContainerProfile(
            name, name, "sprawl-orch sandbox for agent commands", None, 0, ctypes.byref(sid)
        )
        if hr == HRESULT_ALREADY_EXISTS:
            hr = userenv.DeriveAppContainerSidFromAppContainerName(name, ctypes.byref(sid))
        if hr != 0 or not sid.value:
            code = f"{hr & 0xFFFFFFFF:#010x}"
            raise refuse(f"CreateAppContainerProfile({name}) returned HRESULT {code}")
        return cls(name, int(sid.value))

    def grant(self, path: Path) -> None:
        """Full access for the container on `path`, inherited by everything below it.
        SetNamedSecurityInfoW propagates the inheritable ACE to existing children."""
        _, _, advapi = libs()
        k32 = libs()[0]
        old_dacl, sd, new_dacl = PVOID(), PVOID(), PVOID()
        err = advapi.GetNamedSecurityInfoW(
            str(path),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            None,
            None,
            ctypes.byref(old_dacl),
            None,
            ctypes.byref(sd),
        )
        if err:
            raise OSError(err, f"GetNamedSecurityInfoW({path}) failed", None, err)
        try:
            access = EXPLICIT_ACCESS_W()
            access.grfAccessPermissions = FILE_ALL_ACCESS
            access.grfAccessMode = GRANT_ACCESS
            access.grfInheritance = SUB_CONTAINERS_AND_OBJECTS_INHERIT
            access.Trustee.TrusteeForm = TRUSTEE_IS_SID
            access.Trustee.TrusteeType = TRUSTEE_IS_UNKNOWN
            access.Trustee.ptstrName = self.sid
            err = advapi.SetEntriesInAclW(1, ctypes.byref(access), old_dacl, ctypes.byref(new_dacl))
            if err:
                raise OSError(err, "SetEntriesInAclW failed", None, err)
            err = advapi.SetNamedSecurityInfoW(
                str(path), SE_FILE_OBJECT, DACL_SECURITY_INFORMATION, None, None, new_dacl, None
            )
            if err:
                raise OSError(err, f"SetNamedSecurityInfoW({path}) failed", None, err)
        finally:
            if new_dacl.value:
                k32.LocalFree(new_dacl)
            if sd.value:
                k32.LocalFree(sd)

    def delete(self) -> None:
        _, userenv, advapi = libs()
        advapi.FreeSid(self.sid)
        userenv.DeleteAppContainerProfile(self.name)


# -- starting ------------------------------------------------------------------------
class _Attributes:
    """A PROC_THREAD_ATTRIBUTE_LIST holding the security capabilities and the handle list.
    The values it points at must outlive CreateProcessW, so they are kept here."""

    def __init__(self, container: AppContainer, handles: Sequence[int]) -> None:
        k32, _, _ = libs()
        size = SIZE_T(0)
        k32.InitializeProcThreadAttributeList(None, 2, 0, ctypes.byref(size))
        self.buffer = ctypes.create_string_buffer(size.value)
        if not k32.InitializeProcThreadAttributeList(self.buffer, 2, 0, ctypes.byref(size)):
            raise winerror("InitializeProcThreadAttributeList")
        self.capabilities = SECURITY_CAPABILITIES(container.sid, None, 0, 0)
        self.handles = (HANDLE * len(handles))(*handles)
        for attribute, value, length in (
            (
                PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES,
                ctypes.byref(self.capabilities),
                ctypes.sizeof(self.capabilities),
            ),
            (
                PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
                ctypes.byref(self.handles),
                ctypes.sizeof(self.handles),
            ),
        ):
            if not k32.UpdateProcThreadAttribute(
                self.buffer, 0, attribute, value, length, None, None
            ):
                self.close()
                raise winerror("UpdateProcThreadAttribute")

    def close(self) -> None:
        libs()[0].DeleteProcThreadAttributeList(self.buffer)


def _inheritable(fileobj: Any) -> int:
    import msvcrt  # Windows only

    handle = int(msvcrt.get_osfhandle(fileobj.fileno()))  # type: ignore[attr-defined,unused-ignore]
    os.set_handle_inheritable(handle, True)  # type: ignore[attr-defined,unused-ignore]
    return handle


class JobRunning:
    """A `Running` whose tree is the job: waited on by handle, killed by the job."""

    def __init__(self, process: int, job: int, pid: int, launch: Launch, files: list[Any]) -> None:
        self.process, self.job, self.pid = process, job, pid
        self.stdout_path = launch.outputs / "stdout"
        self.stderr_path = launch.outputs / "stderr"
        self._files = files
        self._killed = False

    def wait(self, timeout: float | None) -> bool:
        ms = INFINITE if timeout is None else min(INFINITE - 1, max(0, int(timeout * 1000)))
        return int(libs()[0].WaitForSingleObject(self.process, ms)) == WAIT_OBJECT_0

    def kill(self) -> None:
        self._killed = True
        libs()[0].TerminateJobObject(self.job, KILLED_EXIT)
        self.wait(None)

    def pids(self) -> list[int]:
        return job_pids(self.job)

    def finish(self) -> Finished:
        k32, _, _ = libs()
        self.wait(None)
        code = DWORD(0)
        k32.GetExitCodeProcess(self.process, ctypes.byref(code))
        # Whatever the command left in the job goes with it (the process_tree axis).
        k32.TerminateJobObject(self.job, KILLED_EXIT)
        k32.CloseHandle(self.process)
        k32.CloseHandle(self.job)
        for f in self._files:
            with contextlib.suppress(OSError):
                f.close()
        return Finished(
            exit_code=int(code.value),
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
            killed=self._killed,
        )


def start_in_job(
    launch: Launch,
    container: AppContainer,
    limits: JobLimits,
    plan: Sequence[Step],
    *,
    grant_copy: bool,
) -> JobRunning:
    k32, _, _ = libs()
    launch.outputs.mkdir(parents=True, exist_ok=True)
    files = [
        open(os.devnull, "rb"),  # noqa: SIM115 - handed to the child, closed in finish()
        open(launch.outputs / "stdout", "wb"),  # noqa: SIM115
        open(launch.outputs / "stderr", "wb"),  # noqa: SIM115
    ]
    state: dict[str, Any] = {}
    env = ctypes.create_unicode_buffer(environment_block(launch.env))
    cmd = ctypes.create_unicode_buffer(command_line(launch.argv))

    def create_job() -> Undo:
        state["job"] = new_job()
        return lambda: k32.CloseHandle(state["job"])

    def limit_job() -> None:
        set_limits(state["job"], limits)

    def grant() -> None:
        if grant_copy:
            container.grant(launch.cwd)

    def create_suspended() -> Undo:
        handles = [_inheritable(f) for f in files]
        attrs = _Attributes(container, handles)
        info = STARTUPINFOEXW()
        info.StartupInfo.cb = ctypes.sizeof(info)
        info.StartupInfo.dwFlags = STARTF_USESTDHANDLES
        start = info.StartupInfo
        start.hStdInput, start.hStdOutput, start.hStdError = handles
        info.lpAttributeList = ctypes.addressof(attrs.buffer)
        proc = PROCESS_INFORMATION()
        try:
            ok = k32.CreateProcessW(
                None,
                cmd,
                None,
                None,
                True,
                CREATION_FLAGS,
                env,
                str(launch.cwd),
                ctypes.byref(info),
                ctypes.byref(proc),
            )
            if not ok:
                raise winerror(f"CreateProcessW({launch.argv[0]})")
        finally:
            attrs.close()
        state["proc"] = proc

        def undo() -> None:
            k32.TerminateProcess(proc.hProcess, KILLED_EXIT)
            k32.CloseHandle(proc.hThread)
            k32.CloseHandle(proc.hProcess)

        return undo

    def assign() -> None:
        if not k32.AssignProcessToJobObject(state["job"], state["proc"].hProcess):
            raise winerror("AssignProcessToJobObject")

    def resume() -> None:
        thread = state["proc"].hThread
        if int(k32.ResumeThread(thread)) == 0xFFFFFFFF:
            raise winerror("ResumeThread")
        k32.CloseHandle(thread)

    try:
        run_plan(
            plan,
            {
                Step.CREATE_JOB: create_job,
                Step.LIMIT_JOB: limit_job,
                Step.GRANT_COPY: grant,
                Step.CREATE_SUSPENDED: create_suspended,
                Step.ASSIGN: assign,
                Step.RESUME: resume,
            },
        )
    except OSError as err:
        for f in files:
            f.close()
        raise refuse(str(err)) from err
    proc = state["proc"]
    return JobRunning(int(proc.hProcess), int(state["job"]), int(proc.dwProcessId), launch, files)


def probe() -> tuple[bool, str]:
    """A limited job can be made and an AppContainer profile API exists (Windows 8+)."""
    if sys.getwindowsversion().build < 9200:  # type: ignore[attr-defined,unused-ignore]
        return False, "AppContainers need Windows 8 / Server 2012 or later"
    try:
        k32, userenv, _ = libs()
        userenv.CreateAppContainerProfile  # noqa: B018 - raises AttributeError when absent
        job = new_job()
    except (OSError, AttributeError) as err:
        return False, str(err)
    try:
        set_limits(job, job_limits(64 * 1024 * 1024, 1.0, 8, os.cpu_count() or 1))
    except OSError as err:
        return False, str(err)
    finally:
        k32.CloseHandle(job)
    return True, "a limited Job Object and AppContainer profiles are available"
