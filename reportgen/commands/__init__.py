"""One module per sub-command; each exposes ``register(subparsers)``.

Command modules stay cheap to import: torch is imported inside ``run``.
"""

COMMANDS: tuple[str, ...] = ("profile", "status", "env", "summary", "render", "check", "compare", "models",
                            "history")
