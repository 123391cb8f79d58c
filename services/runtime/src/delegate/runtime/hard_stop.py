"""BUDGET_HARD_STOP_OWNER: over a spend line, the owner's own turns and calls are refused, saying why.

Asked by the agent before an owner turn and by voice before a call the owner starts, only when
the setting is on (off, nothing waits for it). The inner plane keeps the spend projection; when
it does not answer, the turn or call runs: a budget check that is away must not silence the
assistant.
"""

import logging

from delegate.contracts import topics
from delegate.contracts.budget import BudgetLine, BudgetReply, BudgetRequest

from .bus import Bus, BusUnavailable, RemoteError

log = logging.getLogger(__name__)


async def owner_turn_refusal(bus: Bus) -> str | None:
    """The message refusing an owner turn now, or None when it may run."""
    try:
        reply: BudgetReply = await bus.request(topics.INNER_BUDGET, BudgetRequest())
    except (BusUnavailable, RemoteError) as exc:
        log.warning("budget not known (%s): the owner's turn runs", exc)
        return None
    for name, line in (("today's", reply.daily), ("this month's", reply.monthly)):
        if _reached(line):
            return (f"Your spending limit is reached: {name} spend is ${line.spent_usd:.2f} of "
                    f"${line.limit_usd:.2f}. BUDGET_HARD_STOP_OWNER is on, so I am not answering until "
                    "the period resets or the limit is raised.")
    return None


def _reached(line: BudgetLine) -> bool:
    return line.limit_usd is not None and line.spent_usd >= line.limit_usd
