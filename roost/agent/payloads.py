"""Payload policy: nothing heavy and nothing secret reaches events, state, cards or outputs.

:func:`sanitize` walks a JSON value and returns a copy in which

- a value under a secret-looking key (``token``, ``password``, ``api_key``, ``authorization``,
  ``secret``, ``cookie`` …) is replaced by ``"[redacted]"``;
- a credential inside a string (``Bearer …``, ``Basic …``, ``sk-…``, ``ghp_…``, AWS access keys,
  JWTs, PEM private keys, ``password=…``, the password of a URL) is replaced by ``"[redacted]"``;
- a string longer than the threshold is written to the content-addressed :class:`BlobStore` and
  replaced by a reference ``{"$blob": "sha256:<hex>", "bytes": n}``; a long base64 run inside a
  shorter string is replaced, in the text, by ``[blob sha256:<hex> <n> bytes]``;
- a value still larger than ``limit`` bytes once encoded goes to the blob store as a whole
  (``{"$blob": …, "bytes": n, "json": true}``);
- nesting deeper than :data:`MAX_DEPTH` is refused (:class:`PayloadError`).

**Kept, not shown.** What a step needs to run (tool arguments, inputs, checkpoints) must survive a
restart intact. With a :class:`Vault`, :func:`sanitize` *keeps* instead of redacting: a secret goes to
the agent's ``roost_agent_secrets`` table and is replaced by ``{"$secret": "<digest>"}``, and a heavy
string goes to the blob store whole. :func:`resolve` gives the original back to the tool;
:func:`display` turns the kept form into what events, cards and models may see (``"[redacted]"``).

Blobs live under ``DATA/blobs/<h0h1>/<h2h3>/<sha256>``; the same content is stored once. A blob is
written (temporary file, then rename) before the reference is committed, so a reference never points
at nothing; a crash between the two leaves an unreferenced blob, never a dangling reference. Blobs
no actor's file references any longer are removed by ``roost gc`` (:mod:`roost.storage.blobs`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from roost.storage.blobs import blob_lock, blob_path

__all__ = [
    "MAX_DEPTH",
    "REDACTED",
    "BlobStore",
    "PayloadError",
    "Vault",
    "display",
    "error_line",
    "has_secret",
    "is_secret_key",
    "redact_text",
    "resolve",
    "sanitize",
    "secret_parts",
]

REDACTED = "[redacted]"
MAX_DEPTH = 64

_SECRET_KEY = re.compile(
    r"(^|[_\-.])(token|access_token|refresh_token|id_token|password|passwd|pwd|secret|client_secret|"
    r"api[_\-]?key|apikey|authorization|auth|auth[_\-]header|cookie|set[_\-]cookie|private[_\-]?key|"
    r"credentials?)$",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"(?:\bBearer\s+(?=[A-Za-z\-._~+/]*[0-9\-._~+/])[A-Za-z0-9\-._~+/]{8,}=*"
    r"|\bBasic\s+(?=[A-Za-z]*[0-9+/=])[A-Za-z0-9+/]{12,}=*"
    r"|\bsk-[A-Za-z0-9_\-]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bxox[abpors]-[A-Za-z0-9\-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z))"
)
#: ``password=…``, ``api_key: …``: the name stays, the value goes.
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b((?:password|passwd|pwd|secret|token|api[_\-]?key|access[_\-]?key|client[_\-]?secret)"
    r"\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&]+)"
)
#: ``scheme://user:password@host``: the password goes.
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/\s:@]+:)[^@\s/]+@")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{512,}={0,2}")


class PayloadError(ValueError):
    """A value that cannot be stored (nested deeper than :data:`MAX_DEPTH`)."""


def error_line(exc: BaseException) -> str:
    """``"Type: first line of the message"``: what a record says of an exception (never a traceback)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def has_secret(text: str) -> bool:
    return bool(_SECRET_VALUE.search(text) or _SECRET_ASSIGNMENT.search(text) or _URL_PASSWORD.search(text))


#: What a text must hold for each pattern to match it at all: each pattern runs only where its
#: literals are found (a pattern costs ~0.3 µs per character; ``in`` a few ns).
_VALUE_LITERALS = ("Bearer", "Basic", "sk-", "gh", "xox", "AKIA", "eyJ", "-----BEGIN ")
_ASSIGNMENT_WORDS = ("pass", "pwd", "secret", "token", "key")


def redact_text(text: str) -> str:
    """``text`` with every credential it holds replaced by ``[redacted]``."""
    if any(lit in text for lit in _VALUE_LITERALS):
        text = _SECRET_VALUE.sub(REDACTED, text)
    if ("=" in text or ":" in text) and any(w in text.lower() for w in _ASSIGNMENT_WORDS):
        text = _SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + REDACTED, text)
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return text


class BlobStore:
    """Content-addressed files under ``root``.

    **A stored blob is fresh**: :meth:`put` of content already stored sets the file's modification
    time to now instead of writing it again, and it does so (or writes the file) holding the store's
    lock shared (:data:`roost.storage.blobs.LOCK_FILE`), while the collection
    (:mod:`roost.storage.blobs`) holds it exclusive for each removal. A blob ``put`` returns is
    therefore never removed within the collection's grace period after that return, whatever the
    collection had marked: the reference about to be committed is safe."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path:
        return blob_path(self.root, digest)

    def locked(self, how: int) -> int:
        """The store's lock held ``how`` (:func:`roost.storage.blobs.blob_lock`): close to let go."""
        return blob_lock(self.root, how)

    def put(self, data: bytes) -> str:
        """Store ``data`` (once per content, made fresh if stored already); return its reference
        ``sha256:<hex>``."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.path(digest)
        fd = self.locked(fcntl.LOCK_SH)
        try:
            try:
                os.utime(path)
            except FileNotFoundError:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_bytes(data)
                os.replace(tmp, path)
        finally:
            os.close(fd)
        return f"sha256:{digest}"

    def get(self, ref: str) -> bytes:
        return self.path(self._digest(ref)).read_bytes()

    @staticmethod
    def _digest(ref: str) -> str:
        if not ref.startswith("sha256:") or not re.fullmatch(r"[0-9a-f]{64}", ref[7:]):
            raise ValueError(f"not a blob reference: {ref!r}")
        return ref[7:]


class Vault:
    """Where kept secrets go: ``put(value) -> digest`` (the agent's ``roost_agent_secrets`` table)."""

    def __init__(self, put: Callable[[str, str], None], salt: str) -> None:
        self._put = put
        self._salt = salt

    def digest(self, value: Any) -> str:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(self._salt.encode() + b"\0" + data).hexdigest()[:40]

    def keep(self, value: Any) -> dict[str, str]:
        digest = self.digest(value)
        self._put(digest, orjson.dumps(value).decode())
        return {"$secret": digest}


def sanitize(
    value: Any,
    blobs: BlobStore | None,
    threshold: int = 8192,
    *,
    vault: Vault | None = None,
    limit: int | None = None,
    scrub: Callable[[str], str] | None = None,
) -> Any:
    """A copy of ``value`` under the payload policy (see the module doc). Without a blob store,
    heavy strings are cut to ``threshold`` characters with a marker. ``scrub`` is applied to every
    string first (e.g. to remove secrets known to the caller)."""
    out = _walk(value, blobs, threshold, vault, 0, scrub)
    if limit is not None and blobs is not None:
        data = orjson.dumps(out)
        if len(data) > limit:
            return {"$blob": blobs.put(data), "bytes": len(data), "json": True}
    return out


def _walk(
    value: Any,
    blobs: BlobStore | None,
    threshold: int,
    vault: Vault | None,
    depth: int,
    scrub: Callable[[str], str] | None = None,
) -> Any:
    if depth > MAX_DEPTH:
        raise PayloadError(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        if _is_reference(value):
            if vault is not None:  # only the runtime makes references; one from outside is refused
                raise PayloadError('"$secret" and "$blob" objects are reserved')
            return value
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            if is_secret_key(key) and v not in (None, "", "*"):
                out[key] = vault.keep(v) if vault is not None else REDACTED
            else:
                out[key] = _walk(v, blobs, threshold, vault, depth + 1, scrub)
        return out
    if isinstance(value, list | tuple):
        return [_walk(v, blobs, threshold, vault, depth + 1, scrub) for v in value]
    if isinstance(value, str):
        return _text(scrub(value) if scrub is not None else value, blobs, threshold, vault)
    return value


def _is_reference(value: dict[str, Any]) -> bool:
    return (set(value) == {"$secret"} and isinstance(value["$secret"], str)) or (
        "$blob" in value and set(value) <= {"$blob", "bytes", "json"} and isinstance(value["$blob"], str)
    )


def _text(text: str, blobs: BlobStore | None, threshold: int, vault: Vault | None) -> Any:
    if vault is not None:
        if has_secret(text):
            return vault.keep(text)  # kept whole: the tool gets it back exactly
        if blobs is not None and (len(text) > threshold or _BASE64_RUN.search(text)):
            data = text.encode()
            return {"$blob": blobs.put(data), "bytes": len(data)}
        return text
    text = redact_text(text)
    if len(text) > threshold:
        data = text.encode()
        if blobs is None:
            return text[:threshold] + f"… [{len(data)} bytes]"
        return {"$blob": blobs.put(data), "bytes": len(data)}
    if blobs is not None and _BASE64_RUN.search(text):
        return _BASE64_RUN.sub(lambda m: _blob_marker(blobs, m.group(0)), text)
    return text


def _blob_marker(blobs: BlobStore, run: str) -> str:
    return f"[blob {blobs.put(run.encode())} {len(run)} bytes]"


def secret_parts(value: Any, minimum: int = 6) -> list[str]:
    """The strings worth scrubbing wherever a kept secret turns up again: the secret itself, each
    credential found inside it (a Bearer token without its ``Bearer``), every string of a secret
    object; none shorter than ``minimum``."""
    found: list[str] = []
    if isinstance(value, str):
        found.append(value)
        for m in _SECRET_VALUE.finditer(value):
            found.append(m.group(0))
            head, _, rest = m.group(0).partition(" ")
            if head in ("Bearer", "Basic") and rest:
                found.append(rest.strip())
        for m in _SECRET_ASSIGNMENT.finditer(value):
            found.append(m.group(2).strip("\"'"))
    elif isinstance(value, dict):
        for v in value.values():
            found += secret_parts(v, minimum)
    elif isinstance(value, list):
        for v in value:
            found += secret_parts(v, minimum)
    return [f for f in found if len(f) >= minimum]


def display(value: Any) -> Any:
    """The kept form as events, cards and models may see it: secrets as ``"[redacted]"``."""
    if isinstance(value, dict):
        if set(value) == {"$secret"}:
            return REDACTED
        return {k: display(v) for k, v in value.items()}
    if isinstance(value, list):
        return [display(v) for v in value]
    return value


def resolve(value: Any, secret: Callable[[str], Any], blobs: BlobStore) -> Any:
    """The original of a kept value: secrets from the vault, heavy strings from the blob store."""
    if isinstance(value, dict):
        if set(value) == {"$secret"} and isinstance(value["$secret"], str):
            return secret(value["$secret"])
        if _is_reference(value) and "$blob" in value:
            data = blobs.get(value["$blob"])
            if value.get("json"):  # a whole payload: it may hold kept secrets itself
                return resolve(orjson.loads(data), secret, blobs)
            return data.decode()
        return {k: resolve(v, secret, blobs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, secret, blobs) for v in value]
    return value
