"""Addressing other actors: :data:`Key` and :class:`ActorRef` (re-exported by :mod:`roost.actors`).

An :class:`ActorRef` needs of the registry only a way to call an actor (:class:`CallApi`), which
:class:`~roost.actors.registry.Registry` satisfies; so this module imports nothing of the actor runtime
and the protocols of :mod:`roost.actors.interfaces` can name the type ``Actor.actor()`` returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from roost.actors.connection import Principal

__all__ = ["ActorRef", "CallApi", "Key"]

#: An actor's address in one process: ``(kind, name)``.
Key = tuple[str, str]


class CallApi(Protocol):
    """What an :class:`ActorRef` needs of its registry (:class:`~roost.actors.registry.Registry`)."""

    async def call(
        self,
        kind: str,
        name: str,
        method: str,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        chain: tuple[Key, ...] = (),
        timeout: float | None = None,
        principal: Principal | None = None,
    ) -> tuple[Any, list[Any]]:
        """Call a method in process; ``(result, chunks)`` once the callee has committed."""


class ActorRef:
    """A handle on an actor by name. Cheap; activates the actor on use."""

    __slots__ = ("_chain", "_principal", "_registry", "kind", "name")

    def __init__(
        self,
        registry: CallApi,
        kind: str,
        name: str,
        chain: tuple[Key, ...],
        principal: Principal | None = None,
    ) -> None:
        self._registry = registry
        self.kind = kind
        self.name = name
        self._chain = chain
        self._principal = principal  # who caused the calling turn: a read-only caller stays one

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a ``@callable`` of that actor; the result arrives after its commit."""
        result, _ = await self._registry.call(
            self.kind, self.name, method, list(args), kwargs, chain=self._chain, principal=self._principal
        )
        return result
