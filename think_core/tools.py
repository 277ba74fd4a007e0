"""Tools: typed Python functions the model may call.

``@tool`` builds a :class:`Tool` from a function's signature (JSON schema via pydantic) and
docstring. A tool may be sync, async, or an async generator (its yields are preliminary
results; the last one is the result), or return an async iterable (consumed the same way). A *client tool* has a schema and no implementation:
the call is handed to the client and answered with ``session.add_tool_result``.

A tool that declares a parameter annotated :class:`ToolContext` (any name) is given its call's
context there — the session, the call, and the call's ``idempotency_key``; the parameter is not
part of the schema the model sees.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from .events import Usage

_SKIP_SCHEMA_KEYS = ("title",)

P = ParamSpec("P")
R = TypeVar("R", covariant=True)  # a Tool[P, int] is a Tool[P, object]


class ToolAnnotations(BaseModel):
    """MCP-style hints. Unannotated tools are treated as neither read-only nor idempotent."""

    model_config = ConfigDict(frozen=True)

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    needs_approval: bool = False
    idempotent_with_key: bool = False
    """The tool passes its call's ``idempotency_key`` to whatever it changes (a payment API's
    ``Idempotency-Key``, a unique constraint), so running the call again with the same key has
    no second effect: after a crash it is run again instead of being reported as interrupted."""


@dataclass
class ToolContext:
    """What a tool that asks for it (a parameter annotated ``ToolContext``) knows of its call.

    ``idempotency_key`` is derived from the session, the turn (a durable submission's id, so the
    same after a crash and its recovery), the step and the call id: hand it to the service the
    tool changes, and a call run again after a crash has no second effect (declare that with
    ``@tool(idempotent_with_key=True)``).
    """

    session_id: str
    request_id: str
    step_number: int
    tool_call_id: str
    tool_name: str
    idempotency_key: str
    #: The turn's body (a sub-agent's turn gets it too: a client's ``read_only`` still holds).
    body: dict[str, Any] | None = None
    #: The calling agent's plugin objects by name, in registration order (what a sub-agent loads too).
    plugins: dict[str, Any] = field(default_factory=dict)
    #: Usage the call spent on models of its own (a sub-agent's turn), added to the turn's.
    usage: Usage = field(default_factory=Usage)

    def add_usage(self, usage: Usage) -> None:
        """Count ``usage`` (spent by this call on a model) in the calling turn's usage."""
        self.usage = self.usage + usage


class ToolInputError(ValueError):
    """The model's arguments do not match the tool's schema."""


class Tool(Generic[P, R]):
    """A callable the model can use. Build one with :func:`tool` or :meth:`Tool.client`.

    A tool made from a function keeps its type (``Tool[P, R]`` for ``Callable[P, R]``): calling
    it calls the function, and ``__name__``, ``__doc__`` and ``__wrapped__`` are the function's.
    """

    def __init__(
        self,
        name: str,
        description: str,
        parameters: dict[str, Any],
        function: Callable[P, R] | None = None,
        annotations: ToolAnnotations | None = None,
    ) -> None:
        if function is not None:
            functools.update_wrapper(self, function)
        self.name = name
        self.description = description
        self.parameters = parameters
        self.function = function
        self.annotations = annotations or ToolAnnotations()
        self.is_generator = function is not None and inspect.isasyncgenfunction(function)
        self.is_async = function is not None and inspect.iscoroutinefunction(function)
        #: The parameter that receives the call's :class:`ToolContext` (``None``: it takes none).
        self.context_parameter = _context_parameter(function) if function is not None else None
        self._validator = _InputValidator(function, parameters)

    @classmethod
    def client(
        cls,
        name: str,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        **annotations: bool,
    ) -> Tool[..., Any]:
        """A tool the client executes: the turn ends with the call pending."""
        return cls(
            name,
            description,
            parameters or {"type": "object", "properties": {}},
            None,
            ToolAnnotations(**annotations),
        )

    @property
    def is_client(self) -> bool:
        return self.function is None

    @property
    def read_only(self) -> bool:
        return self.annotations.read_only

    def validate_input(self, raw: Any) -> dict[str, Any]:
        """Validate the model's arguments; raises :class:`ToolInputError` with a readable message."""
        if not isinstance(raw, dict):
            raise ToolInputError(
                f"Tool {self.name!r} expects a JSON object of arguments, got {type(raw).__name__}."
            )
        return self._validator.validate(self.name, raw)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.function is None:
            raise TypeError(f"client tool {self.name!r} has no implementation")
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        kind = "client " if self.is_client else ""
        return f"<{kind}Tool {self.name!r}>"


class _InputValidator:
    """Validates tool arguments: by the function's signature for Python tools, by the JSON
    schema's required/unknown keys for client tools."""

    def __init__(self, function: Callable[..., Any] | None, schema: dict[str, Any]) -> None:
        self._schema = schema
        self._signature_validator = None
        if function is not None:
            # validate_call checks types with pydantic without calling the function.
            self._signature_validator = _signature_model(function)

    def validate(self, tool_name: str, raw: dict[str, Any]) -> dict[str, Any]:
        if self._signature_validator is not None:
            try:
                model = self._signature_validator.validate_python(raw)
            except ValidationError as exc:
                raise ToolInputError(_describe(tool_name, exc)) from None
            return {name: getattr(model, name) for name in model.model_fields_set | set(raw)}
        required = self._schema.get("required", [])
        missing = [key for key in required if key not in raw]
        if missing:
            raise ToolInputError(f"Invalid input for tool {tool_name!r}: missing {', '.join(missing)}.")
        return dict(raw)


def _signature_model(function: Callable[..., Any]) -> TypeAdapter[Any]:
    from pydantic import create_model

    fields: dict[str, Any] = {}
    # eval_str resolves annotations written as strings (``from __future__ import annotations``).
    for name, param in inspect.signature(function, eval_str=True).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.annotation is ToolContext:
            continue
        annotation = param.annotation if param.annotation is not inspect.Parameter.empty else Any
        default = param.default if param.default is not inspect.Parameter.empty else ...
        fields[name] = (annotation, default)
    model = create_model(
        f"{function.__name__}_input", __config__=ConfigDict(extra="forbid"), **fields
    )
    return TypeAdapter(model)


def _context_parameter(function: Callable[..., Any]) -> str | None:
    for name, param in inspect.signature(function, eval_str=True).parameters.items():
        if param.annotation is ToolContext:
            return name
    return None


def _describe(tool_name: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "input"
        problems.append(f"{where}: {err['msg']}")
    return f"Invalid input for tool {tool_name!r}: " + "; ".join(problems)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema = {k: v for k, v in schema.items() if k not in _SKIP_SCHEMA_KEYS}
    props = schema.get("properties")
    if isinstance(props, dict):
        schema["properties"] = {
            name: {k: v for k, v in prop.items() if k != "title"} for name, prop in props.items()
        }
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def _schema_for(function: Callable[..., Any]) -> dict[str, Any]:
    return _clean_schema(_signature_model(function).json_schema())


@overload
def tool(
    function: Callable[P, R],
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    needs_approval: bool = False,
    idempotent_with_key: bool = False,
) -> Tool[P, R]: ...


@overload
def tool(
    function: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    needs_approval: bool = False,
    idempotent_with_key: bool = False,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    function: Callable[P, R] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    needs_approval: bool = False,
    idempotent_with_key: bool = False,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Turn a typed function into a :class:`Tool`. Usable bare (``@tool``) or with options
    (``@tool(read_only=True)``); either way the result keeps the function's type."""

    def build(fn: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            name=name or fn.__name__,
            description=description if description is not None else inspect.getdoc(fn) or "",
            parameters=_schema_for(fn),
            function=fn,
            annotations=ToolAnnotations(
                read_only=read_only,
                destructive=destructive,
                idempotent=idempotent,
                needs_approval=needs_approval,
                idempotent_with_key=idempotent_with_key,
            ),
        )

    if function is not None:
        return build(function)
    return build


#: A tool of any signature (what collections of tools hold).
AnyTool = Tool[Any, Any]


def client_tools_from(specs: Any) -> dict[str, AnyTool]:
    """Client tools described by a chat client (``[{name, description, parameters}]``, the
    ``clientTools`` field of a request body)."""
    tools: dict[str, AnyTool] = {}
    if not isinstance(specs, list):
        return tools
    for spec in specs:
        if isinstance(spec, dict) and isinstance(spec.get("name"), str) and spec["name"]:
            parameters = spec.get("parameters") or spec.get("inputSchema")
            tools[spec["name"]] = Tool.client(
                spec["name"], str(spec.get("description") or ""), parameters if isinstance(parameters, dict) else None
            )
    return tools
