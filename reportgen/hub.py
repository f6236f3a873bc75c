"""Models named by their Hugging Face Hub id (``org/name``, optionally ``org/name@revision``).

Only the config is fetched, never weights, through the client transformers itself uses
(``huggingface_hub``), so ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE`` and ``HF_TOKEN``
mean what they mean there. Resolution happens once, in the process that validates the
suite; what it returns (the id, the commit the revision pointed to, the full config) travels
with each combination, so workers never reach the Hub, and the record can rebuild the
model without it.

Every way resolution can fail becomes one `UserError` line naming the id and what to do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from reportgen.errors import UserError

# org/name as the Hub spells repository ids, then an optional @revision (branch, tag,
# commit hash or a ref such as refs/pr/1)
_HUB_ID = re.compile(
    r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)(?:@(?P<revision>[A-Za-z0-9][A-Za-z0-9._/-]*))?$"
)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
FLAG = "--trust-remote-code"


def parse(name: str) -> tuple[str, str | None] | None:
    """(repository id, requested revision or None) for a Hub model name, else None."""
    match = _HUB_ID.match(name)
    if match is None or name.endswith(".json") or "--" in match["repo"]:
        return None
    return match["repo"], match["revision"]


def is_hub_id(name: str) -> bool:
    return parse(name) is not None


def slug(name: str) -> str:
    """A file-name-safe slug: ``Qwen/Qwen2.5-7B`` -> ``qwen--qwen2.5-7b`` (the Hub's own
    separator, which no repository id may contain), ``@v1.0`` -> ``--at-v1.0``; a commit
    hash is cut to 12 characters, and a revision whose slug loses characters (``refs/pr/1``)
    gets a short hash of it, so two names never share a slug."""
    import hashlib

    parsed = parse(name)
    if parsed is None:
        raise ValueError(f"not a Hub model id: {name!r}")
    repo, revision = parsed
    base = repo.lower().replace("/", "--")
    if revision is None:
        return base
    rev = revision[:12] if _COMMIT.match(revision) else revision
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", rev)
    if safe != rev:
        safe = f"{safe}-{hashlib.sha256(revision.encode()).hexdigest()[:6]}"
    return f"{base}--at-{safe}"


def _cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.is_offline_mode())


def _cached_revisions(repo: str) -> list[str] | None:
    """The refs and snapshots the local cache holds for ``repo``; None if it holds none."""
    folder = Path(_cache_dir()) / ("models--" + repo.replace("/", "--"))
    if not folder.is_dir():
        return None
    refs = folder / "refs"
    names = sorted(str(p.relative_to(refs)) for p in refs.rglob("*") if p.is_file()) if refs.is_dir() else []
    snapshots = folder / "snapshots"
    commits = sorted(p.name for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []
    return names + [c[:12] for c in commits]


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps: transformers turns the Hub's errors into OSError ``from`` them."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def explain(exc: BaseException, name: str) -> str:
    """One line naming ``name``, what went wrong and what to do."""
    from huggingface_hub import errors

    repo, revision = parse(name) or (name, None)
    at = f" at revision {revision!r}" if revision else ""
    for err in _chain(exc):
        if isinstance(err, errors.GatedRepoError):
            return (f"{name}: the repository is gated and this machine has no access to it; accept its terms at "
                    f"https://huggingface.co/{repo} and set HF_TOKEN (or run `hf auth login`)")
        if isinstance(err, errors.RepositoryNotFoundError):
            return (f"{name}: no such model on the Hugging Face Hub (or it is private): check the id, or set "
                    "HF_TOKEN if it is a private repository you can read")
        if isinstance(err, errors.RevisionNotFoundError):
            return (f"{name}: the repository has no revision {revision!r}: check the branch, tag or commit hash "
                    f"(https://huggingface.co/{repo}/tree/main)")
        if isinstance(err, errors.RemoteEntryNotFoundError):
            return f"{name}: the repository has no config.json{at}; only transformers models can be profiled"
        if isinstance(err, errors.LocalEntryNotFoundError):
            cached = _cached_revisions(repo)
            where = f"in the local Hub cache ({_cache_dir()})"
            if not _offline():
                return (f"{name}: cannot reach the Hugging Face Hub and its config is not {where}: check the "
                        "connection, or give the path of its config.json instead")
            if cached is not None and revision is not None:
                return (f"{name}: revision {revision!r} is not {where} and HF_HUB_OFFLINE is set; cached: "
                        f"{', '.join(cached) or 'nothing'}; run once online (without HF_HUB_OFFLINE) to fetch it")
            return (f"{name}: its config is not {where} and HF_HUB_OFFLINE is set: check the id, run once online "
                    "(without HF_HUB_OFFLINE) to fetch it, or give the path of its config.json instead")
        if isinstance(err, errors.HfHubHTTPError):
            status = getattr(getattr(err, "response", None), "status_code", None)
            if status == 401:
                return f"{name}: the Hub refused the token (HTTP 401): set HF_TOKEN to a valid token"
            first = (str(err).strip().splitlines() or [""])[0]
            return f"{name}: the Hugging Face Hub answered {status or 'with an error'}: {first}"
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{name}: cannot load its config from the Hugging Face Hub: {type(exc).__name__}: {first}"


def _download_config(repo: str, revision: str | None) -> Path:
    import huggingface_hub

    return Path(huggingface_hub.hf_hub_download(repo, "config.json", revision=revision))


def resolve(name: str, *, trust_remote_code: bool = False) -> dict[str, Any]:
    """The model's source: ``{"kind": "hub", "id", "revision" (the commit),
    "requested_revision", "model_type", "remote_code", "config" (config.json as stored)}``.
    Raises UserError (one line) for anything that stops it."""
    parsed = parse(name)
    if parsed is None:
        raise UserError(f"{name}: not a Hugging Face Hub model id (org/name or org/name@revision)")
    repo, revision = parsed
    try:
        path = _download_config(repo, revision)
        data = json.loads(path.read_text(encoding="utf-8"))
    except UserError:
        raise
    except json.JSONDecodeError as exc:
        raise UserError(f"{name}: its config.json is not valid JSON ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - every Hub failure becomes one line
        raise UserError(explain(exc, name)) from None
    if not isinstance(data, dict):
        raise UserError(f"{name}: its config.json is not a JSON object")
    # the snapshot folder is named by the commit the revision pointed to
    commit = path.parent.name if _COMMIT.match(path.parent.name) else None
    from transformers import CONFIG_MAPPING, __version__

    model_type = data.get("model_type")
    code = (data.get("auto_map") or {}).get("AutoConfig") if isinstance(data.get("auto_map"), dict) else None
    if model_type not in CONFIG_MAPPING:
        if code is None:
            raise UserError(f"{name}: model_type {model_type!r} is not known to transformers {__version__} and the "
                            "repository brings no code for it: upgrade transformers")
        if not trust_remote_code:
            raise UserError(f"{name}: its config needs code from the repository ({code}), which is not run unless "
                            f"you pass {FLAG} (suite setting trust_remote_code = true) and trust that code")
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(repo, revision=commit or revision, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        raise UserError(_remote_code_failure(exc, name, code) if code is not None and trust_remote_code
                        else explain(exc, name)) from None
    remote = not type(config).__module__.startswith("transformers.")
    return {"kind": "hub", "id": repo, "revision": commit, "requested_revision": revision,
            "model_type": config.model_type, "remote_code": remote, "config": data}


def _remote_code_failure(exc: BaseException, name: str, code: str) -> str:
    from huggingface_hub import errors

    start = f"{name}: its config needs code from the repository ({code}), which could not be loaded"
    file = code.split("--")[-1].rsplit(".", 1)[0] + ".py"
    if any(isinstance(err, errors.LocalEntryNotFoundError) for err in _chain(exc)):
        where = f"the local Hub cache ({_cache_dir()})"
        if _offline():
            return f"{start}: {file} is not in {where} and HF_HUB_OFFLINE is set; run once online to fetch it"
        return f"{start}: cannot reach the Hugging Face Hub and {file} is not in {where}"
    return f"{start}: " + explain(exc, name).split(": ", 1)[-1]


def load_remote_config(source: dict[str, Any]) -> Any:
    """A config whose class lives in the repository, from the local cache only (the
    validating process fetched it): workers never reach the Hub."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source["id"], revision=source.get("revision") or source.get(
            "requested_revision"), trust_remote_code=True, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise UserError(explain(exc, source["id"])) from None
