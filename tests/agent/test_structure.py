"""The agent is composed, not inherited (issue #28): its parts are objects handed what they need.

No class of ``delegate.agent`` has more than one base class of our own (a ``delegate.*`` class):
a part that needs another part is given it. Pydantic models are the exception: their bases add
fields, not behaviour or shared state (the settings class gathers ``ServiceSettings`` and
``BudgetSettings``, as every service's does). And a module over 450 lines says at its top why it
is one concept (its docstring names it "one concept"), or it is split.
"""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel

import delegate.agent

ROOT = Path(delegate.agent.__file__).resolve().parent
MAX_LINES = 450


def _modules() -> list[ModuleType]:
    names = [m.name for m in pkgutil.walk_packages(delegate.agent.__path__, "delegate.agent.")]
    return [importlib.import_module(name) for name in ["delegate.agent", *names]]


def _own_bases(cls: type) -> list[str]:
    return [f"{b.__module__}.{b.__qualname__}" for b in cls.__bases__ if b.__module__.startswith("delegate.")]


def test_the_agent_has_its_modules() -> None:
    # The walk below found the agent's parts: an empty walk would pass the checks vacuously.
    names = {m.__name__ for m in _modules()}
    for part in ("agent", "inputs", "turn", "spans", "redelivery", "activation", "away", "compaction", "status"):
        assert f"delegate.agent.{part}" in names, part


def test_no_class_of_the_agent_has_more_than_one_base_class_of_ours() -> None:
    crowded = {}
    for module in _modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or issubclass(cls, BaseModel):
                continue
            if len(_own_bases(cls)) > 1:
                crowded[f"{module.__name__}.{cls.__qualname__}"] = _own_bases(cls)
    assert crowded == {}


def test_the_agent_is_not_a_chain_of_mixins() -> None:
    # The Agent wires its parts: it inherits from none of ours, and each part is an attribute.
    from delegate.agent.agent import Agent

    assert _own_bases(Agent) == []
    assert [c for c in Agent.__mro__ if c.__module__.startswith("delegate.")] == [Agent]


def test_a_long_module_says_why_it_is_one_concept() -> None:
    long = {}
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if lines > MAX_LINES and "one concept" not in docstring.lower():
            long[str(path.relative_to(ROOT))] = lines
    assert long == {}
