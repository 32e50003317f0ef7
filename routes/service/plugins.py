"""Policies chosen by settings: `QUARRY_GRADER=mypkg.judge:make_grader`, and the same for
the router, rewriter and reranker; `answer` and `judge` name the ones Quarry ships.

Each setting names a factory by import path, as uvicorn names an app (`module:attribute`).
The factory is called once at startup with the settings and the loaded engine and returns
the policy object (see retrieval/policy.py for the interfaces). A path that does not import,
a factory that raises, or an object without the interface's methods stops startup with a
one-line message: a service never starts with a policy other than the one configured.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from retrieval.errors import InvalidRequest
from retrieval.policy import Grader, Policy, Reranker, Rewriter, Router

if TYPE_CHECKING:
    from routes.service.view import IndexView

INTERFACES: dict[str, type] = {"router": Router, "grader": Grader, "rewriter": Rewriter, "reranker": Reranker}
# short names for the policies Quarry ships beside its defaults
BUILTIN: dict[str, dict[str, str]] = {
    "grader": {"answer": "routes.policies.answer_policy:make_grader", "judge": "routes.policies.judge:make_judge"},
    "reranker": {"answer": "routes.policies.answer_policy:make_reranker"},
}


class PluginError(InvalidRequest):
    """A configured policy could not be loaded; the message names the setting and the cause."""


def load_factory(setting: str, path: str) -> Any:
    """The callable `module:attribute` names (a dotted attribute path is allowed)."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise PluginError(f"{setting}: {path!r} is not an import path of the form module:factory")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any import failure stops startup with its cause
        raise PluginError(f"{setting}: cannot import {module_name!r} ({type(e).__name__}: {e})") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise PluginError(f"{setting}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise PluginError(f"{setting}: {path!r} is not callable")
    return target


def load_policy(settings: Any, engine: IndexView, base: Policy) -> Policy:
    """`base` with every policy the settings name replaced by its factory's product."""
    changes: dict[str, Any] = {}
    for name, interface in INTERFACES.items():
        path = (getattr(settings, name, None) or "").strip()
        if not path:
            continue
        path = BUILTIN.get(name, {}).get(path, path)
        factory = load_factory(f"QUARRY_{name.upper()}", path)
        try:
            policy = factory(settings, engine)
        except Exception as e:  # noqa: BLE001
            raise PluginError(f"QUARRY_{name.upper()}: {path} raised {type(e).__name__}: {e}") from None
        if not isinstance(policy, interface):
            methods = ", ".join(m for m in vars(interface) if not m.startswith("_") and callable(getattr(interface, m)))
            raise PluginError(f"QUARRY_{name.upper()}: {path} returned {type(policy).__name__}, "
                              f"which lacks the {interface.__name__} methods ({methods})")
        changes[name] = policy
    return replace(base, **changes) if changes else base
