"""Tokens kept out of logs: :func:`redact_tokens` blanks every Roost token (``roost1.…``), every JWT
(``eyJ….eyJ….…``, an identity provider's token) and every ``token=`` query value in a text,
percent-encoded ones too. The server's log filter
(:class:`roost.transport.security.RedactTokens`) and the Python client's (:mod:`roost.client.logs`)
both use :class:`TokenFilter`, so both blank the same things."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

__all__ = ["REDACTED", "TokenFilter", "redact_tokens"]

#: What a token is replaced with.
REDACTED = "[redacted]"

_PATTERN = re.compile(
    r"(roost1\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+|\beyJ[A-Za-z0-9_\-]+\.eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*"
    r"|(?<=token=)[^&\s\"']+)"
)
#: Text that may hold a token: only such text is searched.
_LITERALS = ("roost1.", "token=", "eyJ")


def _may_hold(text: str) -> bool:
    return any(literal in text for literal in _LITERALS)


def redact_tokens(text: str) -> str:
    """``text`` with every token blanked, the same object if it holds none. The search runs on the
    percent-decoded text too (``roost1%2E…`` is a token): where that finds one, the decoded text is
    what is returned, redacted."""
    out = _PATTERN.sub(REDACTED, text) if _may_hold(text) else text
    if "%" in out:
        decoded = unquote(out)
        if _may_hold(decoded):
            blanked = _PATTERN.sub(REDACTED, decoded)
            if blanked != decoded:
                return blanked
    return out


class TokenFilter(logging.Filter):
    """A logging filter that blanks tokens (:func:`redact_tokens`) in each record it passes: its
    message with the arguments, and its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        redacted = redact_tokens(text)
        if redacted is not text:
            record.msg = redacted
            record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_tokens(record.exc_text)
        return True
