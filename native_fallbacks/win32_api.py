"""Win32 types, constants and DLL bindings for the `windows_job` arm (ctypes only).

Structure layouts use fixed-width integers (DWORD = uint32, not ctypes' c_ulong, which is
8 bytes on LP64 Linux), so their sizes are checked on any 64-bit platform against the
Windows x64 headers (tests/unit/test_job_object.py). The DLLs are bound on first use,
so importing this module on Linux is harmless.
"""

from __future__ import annotations

import ctypes
from typing import Any

DWORD = ctypes.c_uint32
WORD = ctypes.c_uint16
BOOL = ctypes.c_int32
HANDLE = ctypes.c_void_p
PVOID = ctypes.c_void_p
SIZE_T = ctypes.c_size_t
ULONG_PTR = ctypes.c_size_t

JobObjectBasicProcessIdList = 3
JobObjectExtendedLimitInformation = 9
JobObjectCpuRateControlInformation = 15
PROC_THREAD_ATTRIBUTE_HANDLE_LIST = 0x00020002
PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES = 0x00020009
STARTF_USESTDHANDLES = 0x00000100
WAIT_OBJECT_0 = 0
WAIT_TIMEOUT = 0x102
INFINITE = 0xFFFFFFFF
HRESULT_ALREADY_EXISTS = -2147024713  # HRESULT_FROM_WIN32(ERROR_ALREADY_EXISTS), 0x800700B7
SE_FILE_OBJECT = 1
DACL_SECURITY_INFORMATION = 0x4
GRANT_ACCESS = 1
SUB_CONTAINERS_AND_OBJECTS_INHERIT = 0x3
TRUSTEE_IS_SID = 0
TRUSTEE_IS_UNKNOWN = 0
FILE_ALL_ACCESS = 0x001F01FF


class JOBOBJECT_BASIC_LIMIT_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", DWORD),
        ("MinimumWorkingSetSize", SIZE_T),
        ("MaximumWorkingSetSize", SIZE_T),
        ("ActiveProcessLimit", DWORD),
        ("Affinity", ULONG_PTR),
        ("PriorityClass", DWORD),
        ("SchedulingClass", DWORD),
    ]


class IO_COUNTERS(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "ReadOperationCount",
            "WriteOperationCount",
            "OtherOperationCount",
            "ReadTransferCount",
            "WriteTransferCount",
            "OtherTransferCount",
        )
    ]


class JOBOBJECT_EXTENDED_LIMIT_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", JOBOBJECT_BASIC_LIMIT_INFORMATION),
        ("IoInfo", IO_COUNTERS),
        ("ProcessMemoryLimit", SIZE_T),
        ("JobMemoryLimit", SIZE_T),
        ("PeakProcessMemoryUsed", SIZE_T),
        ("PeakJobMemoryUsed", SIZE_T),
    ]


class JOBOBJECT_CPU_RATE_CONTROL_INFORMATION(ctypes.Structure):
    # The second field is a union of CpuRate / Weight / (MinRate, MaxRate): one DWORD.
    _fields_ = [("ControlFlags", DWORD), ("CpuRate", DWORD)]


class STARTUPINFOW(ctypes.Structure):
    _fields_ = [
        ("cb", DWORD),
        ("lpReserved", ctypes.c_wchar_p),
        ("lpDesktop", ctypes.c_wchar_p),
        ("lpTitle", ctypes.c_wchar_p),
        ("dwX", DWORD),
        ("dwY", DWORD),
        ("dwXSize", DWORD),
        ("dwYSize", DWORD),
        ("dwXCountChars", DWORD),
        ("dwYCountChars", DWORD),
        ("dwFillAttribute", DWORD),
        ("dwFlags", DWORD),
        ("wShowWindow", WORD),
        ("cbReserved2", WORD),
        ("lpReserved2", ctypes.c_void_p),
        ("hStdInput", HANDLE),
        ("hStdOutput", HANDLE),
        ("hStdError", HANDLE),
    ]


class STARTUPINFOEXW(ctypes.Structure):
    _fields_ = [("StartupInfo", STARTUPINFOW), ("lpAttributeList", ctypes.c_void_p)]


class PROCESS_INFORMATION(ctypes.Structure):
    _fields_ = [
        ("hProcess", HANDLE),
        ("hThread", HANDLE),
        ("dwProcessId", DWORD),
        ("dwThreadId", DWORD),
    ]


class SECURITY_CAPABILITIES(ctypes.Structure):
    _fields_ = [
        ("AppContainerSid", PVOID),
        ("Capabilities", PVOID),  # PSID_AND_ATTRIBUTES; none: zero capabilities
        ("CapabilityCount", DWORD),
        ("Reserved", DWORD),
    ]


class TRUSTEE_W(ctypes.Structure):
    _fields_ = [
        ("pMultipleTrustee", PVOID),
        ("MultipleTrusteeOperation", DWORD),
        ("TrusteeForm", DWORD),
        ("TrusteeType", DWORD),
        ("ptstrName", PVOID),  # with TRUSTEE_IS_SID: the PSID itself
    ]


class EXPLICIT_ACCESS_W(ctypes.Structure):
    _fields_ = [
        ("grfAccessPermissions", DWORD),
        ("grfAccessMode", DWORD),
        ("grfInheritance", DWORD),
        ("Trustee", TRUSTEE_W),
    ]


def _dll(name: str) -> Any:
    return ctypes.WinDLL(name, use_last_error=True)  # type: ignore[attr-defined,unused-ignore]


def winerror(what: str) -> OSError:
    code = ctypes.get_last_error()  # type: ignore[attr-defined,unused-ignore]
    err: OSError = ctypes.WinError(code)  # type: ignore[attr-defined,unused-ignore]
    return OSError(err.errno, f"{what}: {err.strerror}", None, code)


_k32: Any = None
_userenv: Any = None
_advapi: Any = None


def libs() -> tuple[Any, Any, Any]:
    global _k32, _userenv, _advapi
    if _k32 is None:
        _k32, _userenv, _advapi = _dll("kernel32"), _dll("userenv"), _dll("advapi32")
        _k32.CreateJobObjectW.restype = HANDLE
        _k32.CreateJobObjectW.argtypes = [PVOID, ctypes.c_wchar_p]
        _k32.SetInformationJobObject.argtypes = [HANDLE, ctypes.c_int, PVOID, DWORD]
        _k32.QueryInformationJobObject.argtypes = [HANDLE, ctypes.c_int, PVOID, DWORD, PVOID]
        _k32.AssignProcessToJobObject.argtypes = [HANDLE, HANDLE]
        _k32.TerminateJobObject.argtypes = [HANDLE, ctypes.c_uint]
        _k32.TerminateProcess.argtypes = [HANDLE, ctypes.c_uint]
        _k32.ResumeThread.restype = DWORD
        _k32.ResumeThread.argtypes = [HANDLE]
        _k32.WaitForSingleObject.restype = DWORD
        _k32.WaitForSingleObject.argtypes = [HANDLE, DWORD]
        _k32.GetExitCodeProcess.argtypes = [HANDLE, ctypes.POINTER(DWORD)]
        _k32.CloseHandle.argtypes = [HANDLE]
        _k32.LocalFree.argtypes = [PVOID]
        _k32.InitializeProcThreadAttributeList.argtypes = [
            PVOID,
            DWORD,
            DWORD,
            ctypes.POINTER(SIZE_T),
        ]
        _k32.UpdateProcThreadAttribute.argtypes = [
            PVOID,
            DWORD,
            SIZE_T,
            PVOID,
            SIZE_T,
            PVOID,
            PVOID,
        ]
        _k32.DeleteProcThreadAttributeList.argtypes = [PVOID]
        _k32.CreateProcessW.argtypes = [
            ctypes.c_wchar_p,
            ctypes.c_wchar_p,
            PVOID,
            PVOID,
            BOOL,
            DWORD,
            PVOID,
            ctypes.c_wchar_p,
            ctypes.POINTER(STARTUPINFOEXW),
            ctypes.POINTER(PROCESS_INFORMATION),
        ]
        _userenv.CreateAppContainerProfile.restype = ctypes.c_long
        _userenv.CreateAppContainerProfile.argtypes = [
            ctypes.c_wchar_p,
            ctypes.c_wchar_p,
            ctypes.c_wchar_p,
            PVOID,
            DWORD,
            ctypes.POINTER(PVOID),
        ]
        _userenv.DeriveAppContainerSidFromAppContainerName.restype = ctypes.c_long
        _userenv.DeriveAppContainerSidFromAppContainerName.argtypes = [
            ctypes.c_wchar_p,
            ctypes.POINTER(PVOID),
        ]
        _userenv.DeleteAppContainerProfile.restype = ctypes.c_long
        _userenv.DeleteAppContainerProfile.argtypes = [ctypes.c_wchar_p]
        _advapi.FreeSid.argtypes = [PVOID]
        _advapi.GetNamedSecurityInfoW.restype = DWORD
        _advapi.GetNamedSecurityInfoW.argtypes = [
            ctypes.c_wchar_p,
            ctypes.c_int,
            DWORD,
            PVOID,
            PVOID,
            ctypes.POINTER(PVOID),
            PVOID,
            ctypes.POINTER(PVOID),
        ]
        _advapi.SetEntriesInAclW.restype = DWORD
        _advapi.SetEntriesInAclW.argtypes = [
            ctypes.c_ulong,
            ctypes.POINTER(EXPLICIT_ACCESS_W),
            PVOID,
            ctypes.POINTER(PVOID),
        ]
        _advapi.SetNamedSecurityInfoW.restype = DWORD
        _advapi.SetNamedSecurityInfoW.argtypes = [
            ctypes.c_wchar_p,
            ctypes.c_int,
            DWORD,
            PVOID,
            PVOID,
            PVOID,
            PVOID,
        ]
    return _k32, _userenv, _advapi
