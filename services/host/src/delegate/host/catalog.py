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

# Run only when named (not in ``all``): offline, ``make run`` hosts the stand-in beside the
# services instead of in a process of its own.
EXTRAS: dict[str, str] = {"openai-standin": "delegate.openai_standin.main"}

# The services whose code needs click (uvicorn imports it): imported outside the guard against
# unused extras (``delegate.runtime.without_unused_extras``), after every other service (the
# order above), so httpx and the OpenAI SDK, imported under it first, leave out what they
# would load when click and aiohttp are importable: httpx's command-line client (rich,
# pygments) and the SDK's aiohttp transport, a fifth of a host's start.
NEEDS_CLICK = frozenset({"gateway", "openai-standin"})

# Started as soon as its own code is imported, while the others' imports go on (see ``host``):
# the ledger's writer process, which it starts first, takes ~0.5 s of CPU to import on the
# other core, and every service's start waits for the ledger to commit what was published at
# start (the agent's term, the tasks service's catch-up). Its start imports only its store's
# modules lazily (sqlite3 or psycopg, importlib.resources for the migrations): none of them is
# in an import cycle with the other services' libraries, so none can be seen half-initialized.
START_FIRST = ("ledger",)

# The launcher's order (delegate.launcher.run.STOP_STAGES), kept inside the host: every
# service together, then the ledger, which commits what the others sent.
LAST_TO_STOP = ("ledger",)
AFTER_THE_LAST = ("openai-standin",)  # the services may still be finishing a model call


def parse(services: str) -> list[str]:
    """``all`` (every service) or a comma list of names from ``MODULES`` and ``EXTRAS``, in
    that order; ``all`` may be one item of the list (``all,openai-standin``)."""
    wanted = {s.strip() for s in services.split(",") if s.strip()}
    if "all" in wanted:
        wanted = (wanted - {"all"}) | set(MODULES)
    known = {**MODULES, **EXTRAS}
    unknown = wanted - set(known)
    if unknown or not wanted:
        raise ValueError(f"unknown services {sorted(unknown)}: choose from all, {', '.join(known)}")
    return [name for name in known if name in wanted]


def module_of(name: str) -> str:
    return {**MODULES, **EXTRAS}[name]


def stop_stages(names: list[str]) -> list[list[str]]:
    last = [n for n in names if n in LAST_TO_STOP]
    after = [n for n in names if n in AFTER_THE_LAST]
    return [[n for n in names if n not in (*last, *after)], last, after]
