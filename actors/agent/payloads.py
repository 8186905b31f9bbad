"""Payload policy: nothing heavy and nothing secret reaches events, state or the agent's tables.

:func:`sanitize` walks a JSON value and returns a copy in which

- a value under a secret-looking key (``token``, ``password``, ``api_key``, ``authorization``,
  ``secret``, ``cookie`` …) is replaced by ``"[redacted]"``;
- a credential inside a string (``Bearer …``, ``sk-…``, ``ghp_…``, AWS access keys, JWTs,
  PEM private keys) is replaced by ``"[redacted]"``;
- a string longer than the threshold, or a long base64 run, is written to the content-addressed
  :class:`BlobStore` and replaced by a reference ``{"$blob": "sha256:<hex>", "bytes": n}``.

Blobs live under ``DATA/blobs/<h0h1>/<h2h3>/<sha256>``; the same content is stored once. A blob is
written (temporary file, then rename) before the reference is committed, so a reference never points
at nothing; a crash between the two leaves an unreferenced blob, never a dangling reference.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["REDACTED", "BlobStore", "is_secret_key", "sanitize"]

REDACTED = "[redacted]"

_SECRET_KEY = re.compile(
    r"(^|[_\-.])(token|access_token|refresh_token|id_token|password|passwd|pwd|secret|client_secret|"
    r"api[_\-]?key|apikey|authorization|auth|cookie|set[_\-]cookie|private[_\-]?key|credentials?)$",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"(?:\bBearer\s+[A-Za-z0-9\-._~+/]{8,}=*"
    r"|\bsk-[A-Za-z0-9_\-]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bxox[abpors]-[A-Za-z0-9\-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z))"
)
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{512,}={0,2}")


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


class BlobStore:
    """Content-addressed files under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:4] / digest

    def put(self, data: bytes) -> str:
        """Store ``data`` (once per content); return its reference ``sha256:<hex>``."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return f"sha256:{digest}"

    def get(self, ref: str) -> bytes:
        if not ref.startswith("sha256:") or not re.fullmatch(r"[0-9a-f]{64}", ref[7:]):
            raise ValueError(f"not a blob reference: {ref!r}")
        return self.path(ref[7:]).read_bytes()


def sanitize(value: Any, blobs: BlobStore | None, threshold: int = 8192) -> Any:
    """A copy of ``value`` with secrets redacted and heavy strings moved to ``blobs`` (see module doc).

    Without a blob store, heavy strings are cut to ``threshold`` characters with a marker.
    """
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            out[key] = (
                REDACTED if is_secret_key(key) and v not in (None, "") else sanitize(v, blobs, threshold)
            )
        return out
    if isinstance(value, list | tuple):
        return [sanitize(v, blobs, threshold) for v in value]
    if isinstance(value, str):
        return _sanitize_text(value, blobs, threshold)
    return value


def _sanitize_text(text: str, blobs: BlobStore | None, threshold: int) -> Any:
    text = _SECRET_VALUE.sub(REDACTED, text)
    if len(text) > threshold or _BASE64_RUN.search(text):
        data = text.encode()
        if blobs is None:
            return text[:threshold] + f"… [{len(data)} bytes]"
        return {"$blob": blobs.put(data), "bytes": len(data)}
    return text
