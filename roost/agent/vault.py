"""The secret vault: the credentials a run was given, kept for its steps and never shown again.

A secret a step needs later (an argument, an input, a checkpoint) is stored in the agent's own file,
``roost_agent_secrets``, under a salted digest; records and events hold only ``{"$secret": digest}``
(see :mod:`roost.agent.payloads` for the payload policy that finds them).

Guarantees (tests in ``tests/test_agent_policy.py``):

- **Secrets are per run**: the vault remembers, per run, every secret that run was given or handed
  to its tools, and :meth:`SecretVault.scrub` removes exactly those (and only while that run is the
  current one), so one principal's request can never probe another's secrets.
- **One salt per agent**: digests use a random salt made once and kept in the agent's file, so a
  digest shown to a client says nothing about the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from roost.agent.payloads import REDACTED, Vault, secret_parts
from roost.agent.store import Store

__all__ = ["SecretVault"]

#: Secrets remembered per run (longest first), and runs remembered per agent.
MAX_SECRETS_PER_RUN = 64
MAX_RUNS = 256


class SecretVault:
    """The secrets of one agent's runs. Stateless but for the per-run memory of what to scrub."""

    __slots__ = ("_known", "run_id")

    def __init__(self) -> None:
        self._known: dict[str, list[str]] = {}
        #: The run the runtime is working on (set by the orchestrator); scrubbing uses its secrets.
        self.run_id: str | None = None

    def known(self, run_id: str) -> tuple[str, ...]:
        """The secrets remembered for ``run_id`` (longest first): what a stream of that run must
        never cut (:func:`roost.agent.stream_buffer.secret_cut`)."""
        return tuple(self._known.get(run_id, ()))

    def scrub(self, text: str) -> str:
        """``text`` without the secrets of the current run."""
        for secret in self._known.get(self.run_id or "", ()):
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def learn(self, value: Any) -> None:
        """Remember the secret parts of ``value`` for the current run."""
        if self.run_id is None:
            return
        known = self._known.pop(self.run_id, [])
        for part in secret_parts(value):
            if part not in known:
                known.append(part)
        # longest first, so that a secret is scrubbed whole before any part of it
        self._known[self.run_id] = sorted(known, key=len, reverse=True)[:MAX_SECRETS_PER_RUN]
        while len(self._known) > MAX_RUNS:
            del self._known[next(iter(self._known))]

    @staticmethod
    def salt(store: Store, now: float) -> str:
        """The agent's random salt for secret digests (made once, kept in its file)."""
        return store.salt(now)

    def keeper(self, store: Store, now: float) -> Vault:
        """A vault that stores each secret it is handed in ``store`` (and learns it for this run)."""

        def put(digest: str, text: str) -> None:
            store.put_secret(digest, text, now)
            self.learn(orjson.loads(text))

        return Vault(put, store.salt(now))

    def digest(self, store: Store, now: float, value: Any) -> dict[str, str]:
        """The kept form of a secret value, without keeping it (to compare scopes with arguments)."""
        return {"$secret": Vault(lambda d, t: None, store.salt(now)).digest(value)}

    def revealer(self, store: Store) -> Callable[[str], Any]:
        """A lookup of kept secrets by digest (each one revealed is learnt for this run)."""

        def secret(digest: str) -> Any:
            value = store.get_secret(digest)
            self.learn(value)
            return value

        return secret
