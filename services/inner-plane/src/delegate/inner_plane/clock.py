"""Where the broker reads the time: injected, so the policy is tested with a hand-moved clock."""

from collections.abc import Callable
from datetime import datetime

from delegate.contracts.ids import utcnow

Clock = Callable[[], datetime]  # returns an aware datetime


def system_clock() -> datetime:
    return utcnow()
