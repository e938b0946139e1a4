"""The public surface: `agentq.__all__` is sorted, complete and importable without extras."""

from __future__ import annotations

import inspect
import subprocess
import sys

import agentq


def test_all_is_sorted_and_unique() -> None:
    assert list(agentq.__all__) == sorted(agentq.__all__)
    assert len(set(agentq.__all__)) == len(agentq.__all__)


def test_all_names_resolve_and_are_documented() -> None:
    for name in agentq.__all__:
        obj = getattr(agentq, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"


def test_every_public_class_or_function_of_the_modules_is_exported() -> None:
    exported = set(agentq.__all__)
    modules = [
        "clock", "errors", "events", "outcomes", "queue", "retry", "workflows",
    ]
    missing = []
    for mod in modules:
        module = __import__(f"agentq.{mod}", fromlist=["__all__"])
        for name in getattr(module, "__all__", []):
            if name not in exported:
                missing.append(f"agentq.{mod}.{name}")
    assert not missing, f"public names not exported from agentq: {missing}"


def test_import_needs_no_third_party_package() -> None:
    code = (
        "import sys, agentq\n"
        "bad = [m for m in ('aiosqlite', 'pandas', 'ipywidgets', 'nest_asyncio2', "
        "'opentelemetry', 'click', 'rich') "
        "if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_package_ships_py_typed() -> None:
    from importlib.resources import files

    assert files("agentq").joinpath("py.typed").is_file()
