"""The services a host can run, named by their modules only: no service imports another, and
this package imports none of them until it is told which to run."""

# Each module has ``serve(settings, stop)`` and its one settings class as ``Settings``.
MODULES: dict[str, str] = {
    "ledger": "delegate.ledger.main",
    "agent": "delegate.agent.main",
    "inner-plane": "delegate.inner_plane.main",
    "memory": "delegate.memory.main",
    "tasks": "delegate.tasks.main",
    "voice": "delegate.voice.main",
    "pollers": "delegate.pollers.main",
    "gateway": "delegate.gateway.main",
}

# The launcher's order (delegate.launcher.run.STOP_STAGES), kept inside the host: the gateway
# stops taking input first, the ledger, which commits what the others sent, last.
FIRST_TO_STOP = ("gateway",)
LAST_TO_STOP = ("ledger",)


def parse(services: str) -> list[str]:
    """``all`` or a comma list of names from ``MODULES``, in ``MODULES``'s order."""
    wanted = set(MODULES) if services.strip() == "all" else {s.strip() for s in services.split(",") if s.strip()}
    unknown = wanted - set(MODULES)
    if unknown or not wanted:
        raise ValueError(f"unknown services {sorted(unknown)}: choose from all, {', '.join(MODULES)}")
    return [name for name in MODULES if name in wanted]


def stop_stages(names: list[str]) -> list[list[str]]:
    first = [n for n in names if n in FIRST_TO_STOP]
    last = [n for n in names if n in LAST_TO_STOP]
    return [first, [n for n in names if n not in first and n not in last], last]
