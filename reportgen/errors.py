"""User-facing errors: one clear line, exit code 2, nothing written."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (a flag, a suite file, a claim): exit code 2."""

    exit_code = 2


class Skip(Exception):
    """A combination that cannot run here (flash attention on a CPU, a dtype the device
    lacks, a mode the architecture has not): recorded with status ``skipped``."""
