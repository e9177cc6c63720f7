"""Shares: what each run of a backlog asks for (design §11), a plain value.

A leaf of its own: the backlog, serve and the exec tool pass it around, and one run's cgroup
(cgroup_run.py) reads it, without importing the cgroup machinery of cgroups.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator


class Shares(BaseModel):
    """What each run of a backlog asks for: `unset | cpu | cpu_and_memory(limit)`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["unset", "cpu", "cpu_and_memory"] = "unset"
    limit_bytes: int | None = None

    @model_validator(mode="after")
    def _limit_iff_memory(self) -> Shares:
        if (self.kind == "cpu_and_memory") != (self.limit_bytes is not None):
            raise ValueError("limit_bytes is given exactly when kind is cpu_and_memory")
        if self.limit_bytes is not None and self.limit_bytes <= 0:
            raise ValueError(f"limit_bytes must be positive, got {self.limit_bytes}")
        return self

    @classmethod
    def cpu_and_memory(cls, limit: int) -> Shares:
        return cls(kind="cpu_and_memory", limit_bytes=limit)


UNSET = Shares()
