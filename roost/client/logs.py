"""The client's logger, ``roost.client``, which never logs a token.

Its lines name the actor's URL, and a URL may carry ``?token=roost1.…``; a filter on the logger itself
blanks every token (:class:`roost.protocol.redaction.TokenFilter`) in each record it logs, its
arguments and traceback included, before any handler sees it: **no record of the client's logger holds
a token**, whatever handlers the application configures. The same filter sits on ``websockets.client``,
the logger of the library the client connects with, whose DEBUG lines hold the request line
(``> GET /agents/…?token=…``)."""

from __future__ import annotations

import logging

from roost.protocol.redaction import TokenFilter

__all__ = ["logger"]


logger = logging.getLogger("roost.client")
for _name in ("roost.client", "websockets.client"):
    _logger = logging.getLogger(_name)
    if not any(isinstance(f, TokenFilter) for f in _logger.filters):
        _logger.addFilter(TokenFilter())
