"""User-facing errors: one clear line, exit code 2, nothing written."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (a flag, a suite file, a claim): exit code 2."""

    exit_code = 2


class Skip(Exception):
    """A combination that cannot run here (flash attention on a CPU, a dtype the device
    lacks, a mode the architecture has not): recorded with status ``skipped``."""


PROFILE_EXTRA = ("torch", "transformers")


def require_profile_extra(command: str) -> None:
    """One clear line (exit 2) when measuring is asked of an install without torch and
    transformers (the base install renders, checks and compares only)."""
    import importlib.util

    missing = [name for name in PROFILE_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"reportgen {command} needs {' and '.join(missing)}, which this install "
                        "lacks: pip install 'reportgen[profile]'")
