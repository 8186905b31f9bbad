"""Scheduler: time and wake-ups. The injectable clock, trigger maths (APScheduler 3.11's trigger
classes, nothing else of it), and the dispatcher that wakes actors when their alarm is due."""

from roost.scheduler.clock import Clock, FakeClock, SystemClock
from roost.scheduler.dispatcher import Dispatcher
from roost.scheduler.triggers import Trigger, TriggerError, interval_trigger, make_trigger, next_fire

__all__ = [
    "Clock",
    "Dispatcher",
    "FakeClock",
    "SystemClock",
    "Trigger",
    "TriggerError",
    "interval_trigger",
    "make_trigger",
    "next_fire",
]
