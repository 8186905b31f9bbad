"""The agent's records: the store of the current turn, and the payload policy at its edge.

Every row the runtime writes goes through :meth:`Records.store` (the turn's connection from the
extension API, free text cleaned on the way in), and every value it shows or keeps goes through one
of the entry points below (see :mod:`roost.agent.payloads` for the policy itself):

- :meth:`Records.clean` — what may be shown (events, results, cards): secrets redacted, heavy
  strings to the blob store;
- :meth:`Records.keep` — what a step needs later (arguments, inputs, checkpoints), kept intact but
  with secrets in the vault (:mod:`roost.agent.vault`);
- :meth:`Records.original` — a kept value as the tool gets it back;
- :meth:`Records.shown` — a kept value as events, cards and models may see it.
"""

from __future__ import annotations

from typing import Any

from roost.actors.extension import TurnContext
from roost.agent.payloads import BlobStore, display, redact_text, resolve, sanitize
from roost.agent.store import Store
from roost.agent.vault import SecretVault

__all__ = ["Records"]


class Records:
    """One agent's records and payload policy; every method but :meth:`shown` is turn only."""

    __slots__ = ("_ctx", "blobs", "limit", "threshold", "vault")

    def __init__(self, ctx: TurnContext, blobs: BlobStore, threshold: int, limit: int) -> None:
        self._ctx = ctx
        self.blobs = blobs
        self.threshold = threshold
        self.limit = limit
        self.vault = SecretVault()

    def concern(self, run_id: str) -> None:
        """What follows concerns ``run_id``: scrubbing uses that run's secrets (and no other's)."""
        self.vault.run_id = run_id

    def store(self) -> Store:
        """The current turn's rows, with free text cleaned on the way in."""
        return Store(self._ctx.connection(), self.clean_text)

    def clean(self, value: Any) -> Any:
        """What may be shown: secrets redacted, heavy strings to blobs (events, results, cards)."""
        return sanitize(value, self.blobs, self.threshold, limit=self.limit, scrub=self.vault.scrub)

    def clean_text(self, text: str) -> str:
        """Free text (an error, an output): credentials redacted; beyond the threshold, the full
        text goes to the blob store and the column keeps its start and the reference."""
        text = redact_text(self.vault.scrub(text))
        if len(text) > self.threshold:
            ref = self.blobs.put(text.encode())
            return text[: self.threshold // 4] + f" … [full text: {ref}]"
        return text

    def keep(self, value: Any) -> Any:
        """What a step needs later, kept intact but out of sight (arguments, inputs, checkpoints)."""
        vault = self.vault.keeper(self.store(), self._ctx.now)
        return sanitize(value, self.blobs, self.threshold, vault=vault, limit=self.limit)

    def original(self, kept: Any) -> Any:
        """A kept value as the tool gets it back."""
        return resolve(kept, self.vault.revealer(self.store()), self.blobs)

    def digest(self, value: Any) -> dict[str, str]:
        """The kept form of a secret value, without keeping it (to compare scopes with arguments)."""
        return self.vault.digest(self.store(), self._ctx.now, value)

    def salt(self) -> str:
        """The agent's random salt for secret digests (made once, kept in its file)."""
        return self.vault.salt(self.store(), self._ctx.now)

    @staticmethod
    def shown(kept: Any) -> Any:
        """A kept value as events, cards and models may see it."""
        return display(kept)
