"""The coder's Python sandbox (sandbox/): its mode and each run's limits."""

from __future__ import annotations

from pydantic import Field

from config.groups.base import SettingsGroup


class SandboxSettings(SettingsGroup):
    """``python_repl_tool``'s containment."""

    # The coder's Python sandbox (sandbox/). "isolated" contains the code or refuses every call;
    # "plain" is the operator's explicit consent to run model-written code uncontained. A string,
    # not a Literal: a wrong value must make python_repl_tool refuse, not every activity fail.
    sandbox_mode: str = Field(default="isolated", alias="DEERFLOW_SANDBOX_MODE")
    """The coder's Python: `isolated` (contain or refuse) or `plain` (explicit opt-in to run it uncontained)."""
    sandbox_memory_mb: int = Field(default=1024, ge=16, alias="DEERFLOW_SANDBOX_MEMORY_MB")
    """Memory cap of one sandboxed run."""
    sandbox_disk_mb: int = Field(default=64, ge=1, le=4096, alias="DEERFLOW_SANDBOX_DISK_MB")
    """Disk cap of one sandboxed run."""
    sandbox_uid_base: int = Field(default=64000, ge=1000, le=2**31 - 64, alias="DEERFLOW_SANDBOX_UID_BASE")
    """First of the user ids the isolated sandbox runs code as."""
