"""Scheduler: time and wake-ups. For now the injectable clock that every timer in Roost uses."""

from scheduler.clock import Clock, FakeClock, SystemClock

__all__ = ["Clock", "FakeClock", "SystemClock"]
