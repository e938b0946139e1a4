"""pydantic-ai's per-run options as a `DurableAgent` takes them: stored with the run, or given.

A caller gives `RunOptions` to `run`, `start`, `approve` and `deny`. The options that are JSON
are stored in the run's input (under ``"options"``, only when one is set, so runs stored before
options existed keep their input), so that a continuation in another process (``engine.run``,
``engine.resume``, ``recover``, ``serve``) runs with them:

- ``model`` given by name (a str), or a `Model` object registered by name with
  ``DurableAgent(models={name: model})`` (its name is stored);
- ``model_settings`` given as a dict of JSON values;
- ``usage_limits`` (a `UsageLimits`, stored as its fields);
- ``instructions`` given as a str.

The others are not JSON and never stored: a `Model` object not registered, settings or
instructions given as callables, ``output_type``, ``toolsets``, ``event_stream_handler``.
They are kept in the process they were given in, for the run's attempts there; a
continuation elsewhere is given them again. `agent_kwargs` merges both for one attempt: what
was given in this process wins, the stored options fill in the rest, and a stored model name
finds its object among the registered models (else pydantic-ai resolves the name itself).

`output_adapter` validates a run's recorded output (JSON) again as the output type's value.
"""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, fields, replace
from typing import Any, TypedDict, Union

from pydantic import TypeAdapter
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model, infer_model
from pydantic_ai.output import NativeOutput, PromptedOutput, TextOutput, ToolOutput
from pydantic_ai.providers import Provider, infer_provider_class
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import UsageLimits

from agentq.codec import encode
from agentq.errors import PayloadError
from agentq.integrations.pydantic_ai._replay import output_tools_of
from agentq.store import CallRow

__all__ = [
    "RunOptions",
    "RunOptionsKwargs",
    "agent_kwargs",
    "check_model_name",
    "check_models",
    "output_adapter",
]

_log = logging.getLogger(__name__)
_LIMITS: TypeAdapter[UsageLimits] = TypeAdapter(UsageLimits)


class RunOptionsKwargs(TypedDict, total=False):
    """The per-run options of ``Agent.run`` that `DurableAgent`'s methods take as keywords.

    See `RunOptions` for what each is, and docs/agents.md for which are stored.
    """

    model: Model | str | None
    model_settings: Any
    usage_limits: UsageLimits | None
    output_type: Any
    instructions: Any
    toolsets: Sequence[AbstractToolset[Any]] | None
    event_stream_handler: Callable[..., Any] | None


@dataclass(frozen=True, slots=True)
class RunOptions:
    """pydantic-ai's per-run options given to one call of a `DurableAgent` (None: not given).

    Attributes:
        model: A model name (``"openai:gpt-5.2"``, or a name of ``DurableAgent(models=)``),
            or a `Model` object.
        model_settings: A ``ModelSettings`` dict, or a callable ``RunContext -> settings``.
        usage_limits: A `UsageLimits`.
        output_type: The run's output spec (as ``Agent.run(output_type=)``).
        instructions: Instructions added for the run (a str, a callable, a sequence).
        toolsets: Toolsets added for the run.
        event_stream_handler: The run's event-stream handler.
    """

    model: Model | str | None = None
    model_settings: Any = None
    usage_limits: UsageLimits | None = None
    output_type: Any = None
    instructions: Any = None
    toolsets: Sequence[AbstractToolset[Any]] | None = None
    event_stream_handler: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        """Check the types of the options pydantic-ai would refuse only inside the run.

        Raises:
            TypeError: An option of the wrong type (the option and its value named).
        """
        if self.model is not None and not isinstance(self.model, str | Model):
            raise TypeError(f"model must be a model name (str) or a Model, got {self.model!r:.80}")
        if self.model_settings is not None and not (
            isinstance(self.model_settings, Mapping) or callable(self.model_settings)
        ):
            raise TypeError(
                f"model_settings must be a ModelSettings dict or a callable, got "
                f"{self.model_settings!r:.80}"
            )
        if self.usage_limits is not None and not isinstance(self.usage_limits, UsageLimits):
            raise TypeError(f"usage_limits must be a UsageLimits, got {self.usage_limits!r:.80}")
        if self.toolsets is not None and (
            isinstance(self.toolsets, str | bytes | Mapping)
            or not isinstance(self.toolsets, Sequence)
            or not all(isinstance(t, AbstractToolset) for t in self.toolsets)
        ):
            raise TypeError(f"toolsets must be a list of toolsets, got {self.toolsets!r:.80}")
        if self.event_stream_handler is not None and not callable(self.event_stream_handler):
            raise TypeError(
                f"event_stream_handler must be a callable, got {self.event_stream_handler!r:.80}"
            )

    def over(self, older: RunOptions | None) -> RunOptions:
        """These options, the ones not given here taken from `older` (given earlier)."""
        if older is None:
            return self
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        return replace(older, **{k: v for k, v in given.items() if v is not None})

    def for_rebuild(self, run_id: str, rows: list[CallRow], agent_output: Any) -> RunOptions:
        """These options for the rebuild of the messages of `run_id` from its log (`rows`):
        with ``output_type`` standing in for the run's output tools when none is given and
        the agent's own (`agent_output`) is text (see `_replay.output_tools_of`, which names
        the error raised when none can)."""
        if self.output_type is not None or agent_output is not str:
            return self
        stand_in = output_tools_of(run_id, rows)
        return self if stand_in is None else replace(self, output_type=stand_in)

    def stored(self, models: Mapping[str, Model]) -> dict[str, Any]:
        """The options stored with a run: those that are JSON (see the module docstring).

        Args:
            models: The models registered by name (a registered `Model` object is stored as
                its name).

        Returns:
            ``{"model": name, "model_settings": {...}, "usage_limits": {...},
            "instructions": str}``, each key only when that option is given and storable.

        Raises:
            ValueError: `model` is a name neither registered in `models` nor known to
                pydantic-ai (`check_model_name`): refused before the run is stored.
        """
        out: dict[str, Any] = {}
        if isinstance(self.model, str):
            if self.model not in models:
                check_model_name(self.model)
            out["model"] = self.model
        elif self.model is not None:
            names = [name for name, m in models.items() if m is self.model]
            if names:
                out["model"] = names[0]
        if isinstance(self.model_settings, Mapping) and _is_json(self.model_settings):
            out["model_settings"] = dict(self.model_settings)
        if self.usage_limits is not None:
            out["usage_limits"] = _LIMITS.dump_python(
                self.usage_limits, mode="json", exclude_defaults=True
            )
        if isinstance(self.instructions, str):
            out["instructions"] = self.instructions
        return out


def _is_json(value: object) -> bool:
    try:
        encode(value, "model_settings")
    except PayloadError:
        return False
    return True


class _Known(Exception):
    """Raised by `_no_provider`: pydantic-ai took the model name, up to its provider."""


def _no_provider(name: str) -> Provider[Any]:
    """A ``provider_factory`` of ``infer_model`` that checks the provider name exactly as
    pydantic-ai's own does, then stops before a provider (and its API key) is made."""
    with suppress(ImportError):  # a known provider whose extra is missing here: name right
        infer_provider_class(name)
    raise _Known(name)


def check_model_name(name: str) -> None:
    """Check that pydantic-ai resolves the model name `name` (``"openai:gpt-5.2"``,
    ``"test"``) the way ``pydantic_ai.models.infer_model`` does, without making a provider
    (no API key is needed or read).

    Raises:
        ValueError: pydantic-ai knows no such model or provider (its message included).
    """
    try:
        infer_model(name, provider_factory=_no_provider)
    except _Known:
        return
    except (UserError, ValueError) as exc:
        raise ValueError(
            f"model {name!r} is not a model pydantic-ai knows ({exc}); give "
            "'<provider>:<model>' (e.g. 'openai:gpt-5.2') or a name of DurableAgent(models=)"
        ) from None


def check_models(models: object) -> dict[str, Model]:
    """Return `models` (``DurableAgent(models=)``) as a dict, checked.

    Raises:
        TypeError: Not a mapping of str to `Model` (the offending entry named).
    """
    if models is None:
        return {}
    if not isinstance(models, Mapping):
        raise TypeError(f"models must be a dict of name -> Model, got {models!r:.80}")
    for name, model in models.items():
        if not isinstance(name, str) or not name or not isinstance(model, Model):
            raise TypeError(
                f"models must map a name (a non-empty str) to a Model, got {name!r:.40}: "
                f"{model!r:.60}"
            )
    return dict(models)


def agent_kwargs(
    stored: Mapping[str, Any] | None, given: RunOptions | None, models: Mapping[str, Model]
) -> dict[str, Any]:
    """The keyword arguments of ``Agent.run`` for one attempt of a run.

    Args:
        stored: The options stored with the run (``run_input.get("options")``).
        given: The options given for the run in this process (they win), or None.
        models: The models registered by name.

    Returns:
        Only the options set: ``{"model": ..., "model_settings": ..., ...}``.
    """
    stored = stored or {}
    given = given or RunOptions()
    out: dict[str, Any] = {}
    model = given.model if given.model is not None else stored.get("model")
    if model is not None:
        out["model"] = models.get(model, model) if isinstance(model, str) else model
    settings = given.model_settings or stored.get("model_settings")
    if settings is not None:
        out["model_settings"] = settings
    limits = given.usage_limits
    if limits is None and stored.get("usage_limits") is not None:
        limits = _LIMITS.validate_python(stored["usage_limits"])
    if limits is not None:
        out["usage_limits"] = limits
    instructions = (
        given.instructions if given.instructions is not None else stored.get("instructions")
    )
    if instructions is not None:
        out["instructions"] = instructions
    for name in ("output_type", "toolsets", "event_stream_handler"):
        if getattr(given, name) is not None:
            out[name] = getattr(given, name)
    return out


def output_adapter(spec: Any) -> TypeAdapter[Any] | None:
    """A validator of the values of the output spec `spec` (an ``output_type``), or None.

    The output markers (`ToolOutput`, `NativeOutput`, `PromptedOutput`, `TextOutput`) stand
    for what they wrap; an output function for its return annotation; a list for the union
    of its items. None when no validator can be built (a spec pydantic cannot describe).
    """
    try:
        types = _types_of(spec)
        form: Any = types[0] if len(types) == 1 else Union[tuple(types)]  # noqa: UP007
        return TypeAdapter(form)
    except Exception:  # the output is then read as its JSON
        _log.debug("no validator for output spec %r", spec, exc_info=True)
        return None


def _types_of(spec: Any) -> list[Any]:
    if isinstance(spec, NativeOutput | PromptedOutput):
        return _types_of(spec.outputs)
    if isinstance(spec, ToolOutput):
        return _types_of(spec.output)
    if isinstance(spec, TextOutput):
        return [_returns(spec.output_function)]
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return [t for item in spec for t in _types_of(item)]
    if inspect.isfunction(spec) or inspect.ismethod(spec):
        return [_returns(spec)]
    return [spec]


def _returns(function: Callable[..., Any]) -> Any:
    """The return annotation of `function` (awaited for a coroutine function), else Any."""
    return typing.get_type_hints(function).get("return", Any)
