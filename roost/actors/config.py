"""The knobs of the actor runtime: :class:`RuntimeConfig` (re-exported by :mod:`roost.actors.registry`).

A module of its own because both the registry, which owns the runtime, and the host, which reads its
limits through :class:`~roost.actors.interfaces.RegistryApi`, need it; it imports nothing of the actor
runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from roost.storage import Durability

__all__ = ["RuntimeConfig"]


@dataclass(slots=True)
class RuntimeConfig:
    """Knobs of the actor runtime. See ``docs/design.md`` for how the defaults were chosen."""

    data_dir: Path = Path("data")
    idle_timeout: float = 60.0
    max_active: int = 2000
    turn_timeout: float = 30.0
    call_timeout: float = 30.0
    log_retention: int = 2048
    max_batch: int = 256
    max_inbox: int = 10_000
    stop_timeout: float = 10.0
    scheduler: bool = True  # run the wake-up dispatcher in this process
    poll_interval: float = 1.0  # how often the dispatcher looks for alarms set by other processes
    wakeup_lease: float = 10.0  # a claimed wake-up of a crashed process comes due again after this
    durability: Durability = "normal"
    sweep_interval: float | None = None  # default: min(idle_timeout / 2, 5 s)
    #: Descriptors kept for sockets and the rest when ``max_active`` is sized to the descriptor
    #: limit at start (roost.actors.descriptors); default: a quarter of the limit, at least 64.
    fd_reserve: int | None = None
