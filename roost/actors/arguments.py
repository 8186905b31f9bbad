"""A ``@callable``'s arguments, checked against its signature before its turn runs any of its code.

:class:`Arguments` is built once per callable, when its kind is registered
(:func:`~roost.actors.decorators.callables_of`), and called on every call with the call's ``args``
and ``kwargs``; it returns the arguments to call the method with, or raises
:class:`~roost.actors.errors.InvalidArguments` (code ``invalid_arguments``).

The rules (``docs/protocol.md``, *Arguments*):

- **Binding** is Python's, without ``self``: positional and keyword arguments, defaults, ``*args``
  and ``**kwargs``. A call that does not bind says why in the caller's terms ("missing a required
  argument: 'text'", "takes at most 2 positional arguments (text, author), got 4").
- **Types**: each argument whose parameter is annotated is validated by pydantic, *strictly, as
  JSON*: the value must have its annotation's JSON type (no ``"5"`` for an ``int``, no ``"no"`` for a
  ``bool``, no ``1.5`` or ``true`` for an ``int``; an ``int`` is a ``float``); the types JSON has no
  form for are read from their usual JSON form (an ISO 8601 string for a ``datetime``, an array for a
  ``tuple``, a value for an ``Enum``, an object for a model). An in-process caller's argument (another
  actor, HTTP, the test kit) is validated as if it had come over the wire: it is encoded as JSON
  first, and one that has no JSON form is validated as the Python object it is.
- Unannotated parameters, and those annotated ``Any`` or ``object``, accept anything.
- The method gets the validated values (a float for an ``int`` given to a ``float``, a model for an
  object given to a model); a value that already has its scalar annotation's exact type is passed on
  as it is.
- An annotation that cannot be resolved, or that pydantic cannot validate, fails the kind's
  registration (``TypeError`` naming the method and the parameter): annotate it ``Any`` instead.

:func:`result_check` (``@callable(validate_result=True)``) validates what the method returns (each
chunk of a streaming one, against the item type of its ``AsyncIterator[...]``) the same way, and hands
on its JSON form; a result that does not fit is the method's own failure (``handler_error``).

Cost: a parameter annotated with a JSON scalar (``int``, ``float``, ``str``, ``bool``, ``None``, or a
union of them such as ``str | None``) costs one ``type()`` comparison when the value already has that
exact type; pydantic runs only for other annotations, or to convert or refuse a value.

Guarantees (tests in ``tests/test_call_arguments.py``): arguments are checked before the method
runs, so a refused call writes nothing; the message names the argument and what was expected, never
``self`` or an exception's text.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from typing import Any

import orjson
from pydantic import PydanticUserError, TypeAdapter, ValidationError

from roost.actors.errors import InvalidArguments

__all__ = ["Arguments", "Check", "result_check"]

#: Validates one value: returns it (or its converted form) or raises ``ValidationError``.
Check = Callable[[Any], Any]

_P = inspect.Parameter
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_SCALARS: tuple[type, ...] = (int, float, str, bool, type(None))
_STREAMS = (AsyncIterator, AsyncGenerator, AsyncIterable)
_MAX_MESSAGE = 500


class Arguments:
    """The binding and validation of one callable's arguments; ``arguments(args, kwargs)`` returns
    the ``(args, kwargs)`` to call the method with, or raises ``InvalidArguments``."""

    __slots__ = (
        "_annotations",
        "_checks",
        "_fast",
        "_kinds",
        "_max",
        "_min",
        "_names",
        "_plain",
        "_pos_checks",
        "_required",
        "_var",
        "method",
        "signature",
    )

    def __init__(self, method: str, fn: Callable[..., Any], *, has_self: bool = True) -> None:
        params = list(inspect.signature(fn).parameters.values())[1 if has_self else 0 :]
        self.method = method
        #: The signature a caller sees (without ``self``).
        self.signature = inspect.Signature(params)
        annotations = {p.name: _resolve(fn, p.name, p.annotation) for p in params}
        checks = {p.name: _checker(fn, p.name, annotations[p.name]) for p in params}
        self._annotations = annotations
        positional = [p for p in params if p.kind in _POSITIONAL]
        self._checks = checks
        self._kinds = {p.name: p.kind for p in params}
        self._names = tuple(p.name for p in positional)
        self._pos_checks = tuple(checks[p.name] for p in positional)
        self._max = len(positional)
        self._min = sum(1 for p in positional if p.default is _P.empty)
        self._var = any(p.kind is _P.VAR_POSITIONAL for p in params)
        # positional arguments alone bind by position: nothing else is needed
        self._fast = not self._var and not any(
            p.kind is _P.KEYWORD_ONLY and p.default is _P.empty for p in params
        )
        # every parameter can be passed by name: keyword arguments bind by hand
        self._plain = all(p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY) for p in params)
        self._required = tuple(p.name for p in params if p.default is _P.empty)

    def __call__(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        if kwargs:
            return self._by_name(args, kwargs) if self._plain else self._bind(args, kwargs)
        if not self._fast or not self._min <= len(args) <= self._max:
            return self._bind(args, kwargs)
        out: list[Any] | None = None
        checks = self._pos_checks
        i = 0
        try:
            for i, value in enumerate(args):
                check = checks[i]
                if check is not None:
                    checked = check(value)
                    if checked is not value:
                        if out is None:
                            out = list(args)
                        out[i] = checked
        except ValidationError as exc:
            raise self._invalid(self._names[i], exc) from None
        return (args if out is None else out), kwargs

    def _by_name(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Bind a plain signature's arguments by hand, all by name (``inspect``'s binding costs
        several µs); anything irregular goes to :meth:`_bind`, which says what is wrong."""
        checks = self._checks
        if len(args) > self._max:
            return self._bind(args, kwargs)
        bound = dict(zip(self._names, args, strict=False))
        for key, value in kwargs.items():
            if key not in checks or key in bound:
                return self._bind(args, kwargs)
            bound[key] = value
        for name in self._required:
            if name not in bound:
                return self._bind(args, kwargs)
        name = ""
        try:
            for name, value in bound.items():
                check = checks[name]
                if check is not None:
                    bound[name] = check(value)
        except ValidationError as exc:
            raise self._invalid(name, exc) from None
        return [], bound

    def _bind(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        if not self._var and len(args) > self._max:
            n = self._max
            takes = (
                f"takes at most {n} positional argument{'s' if n > 1 else ''} ({', '.join(self._names)})"
                if n
                else "takes no positional arguments"
            )
            raise InvalidArguments(message=f"{self.method}: {takes}, got {len(args)}")
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:  # inspect's messages name the parameter, not self
            raise InvalidArguments(message=f"{self.method}: {exc}"[:_MAX_MESSAGE]) from None
        arguments = bound.arguments
        for name, value in arguments.items():
            check = self._checks[name]
            if check is None:
                continue
            kind = self._kinds[name]
            label = name
            try:
                if kind is _P.VAR_POSITIONAL:
                    items: list[Any] = []
                    for j, item in enumerate(value):
                        label = f"{name}[{j}]"
                        items.append(check(item))
                    arguments[name] = tuple(items)
                elif kind is _P.VAR_KEYWORD:
                    named: dict[str, Any] = {}
                    for key, item in value.items():
                        label = key  # passed by keyword: the caller named it so
                        named[key] = check(item)
                    arguments[name] = named
                else:
                    arguments[name] = check(value)
            except ValidationError as exc:
                raise self._invalid(label, exc) from None
        return list(bound.args), bound.kwargs

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of a call's keyword arguments: an object with one property
        per parameter that can be passed by name (its annotation's schema, ``{}`` for one that
        accepts anything, its default when it has a JSON form), ``required`` for those without a
        default, and ``additionalProperties`` from ``**kwargs`` (its item schema; ``false``
        without). ``*args`` have no name a caller could give: they are left out. Positional-only
        parameters are listed under their names (a caller that passes arguments by name, the MCP
        server, hands them on by position)."""
        properties: dict[str, Any] = {}
        required: list[str] = []
        defs: dict[str, Any] = {}
        extra: Any = False
        for param in self.signature.parameters.values():
            annotation = self._annotations[param.name]
            schema = _schema_of(annotation, defs)
            if param.kind is _P.VAR_POSITIONAL:
                continue
            if param.kind is _P.VAR_KEYWORD:
                extra = schema
                continue
            if param.default is not _P.empty:
                try:
                    schema = {**schema, "default": orjson.loads(orjson.dumps(param.default))}
                except TypeError:
                    pass
            else:
                required.append(param.name)
            properties[param.name] = schema
        out: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": properties,
        }
        if required:
            out["required"] = required
        out["additionalProperties"] = extra
        if defs:
            out["$defs"] = defs
        return out

    def _invalid(self, label: str, exc: ValidationError) -> InvalidArguments:
        return InvalidArguments(message=f"{self.method}: {describe(label, exc)}"[:_MAX_MESSAGE])


def describe(label: str, exc: ValidationError, noun: str = "argument") -> str:
    """What was wrong with the value of ``label``, in the caller's (JSON) terms: at most three problems,
    each with where in the value, what was expected and the JSON type it got (never the value)."""
    errors = exc.errors(include_url=False, include_context=False)
    problems = []
    for err in errors[:3]:
        path = label + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        msg = err["msg"]
        text = msg[:1].lower() + msg[1:]
        if err["type"] != "missing":
            text += f", got {json_type(err['input'])}"
        problems.append(f"{noun} {path!r}: {text}" if noun else f"{path!r}: {text}")
    if len(errors) > 3:
        problems.append(f"and {len(errors) - 3} more")
    return "; ".join(problems)


def json_type(value: Any) -> str:
    """The JSON name of a value's type (``an object``, ``a string``...)."""
    if value is None:
        return "null"
    for tp, name in _JSON_NAMES:
        if isinstance(value, tp):
            return name
    return f"a {type(value).__name__}"


_JSON_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (list, "an array"),
    (tuple, "an array"),
    (dict, "an object"),
)


def result_check(method: str, fn: Callable[..., Any], streaming: bool) -> Check:
    """The check of what ``fn`` returns (of each chunk it yields if ``streaming``): the validated
    value's JSON form, or a ``TypeError`` (the method broke its own annotation: ``handler_error``)."""
    annotation = _resolve(fn, "return", inspect.signature(fn).return_annotation)
    if annotation is _P.empty:
        raise TypeError(f"@callable(validate_result=True) {fn.__qualname__}: no return annotation")
    if streaming:
        if typing.get_origin(annotation) not in _STREAMS or not typing.get_args(annotation):
            raise TypeError(
                f"@callable(validate_result=True) {fn.__qualname__}: a streaming callable's return "
                "annotation must be AsyncIterator[item type]"
            )
        annotation = typing.get_args(annotation)[0]
    adapter = _adapter(fn, "return", annotation)
    what = "chunk" if streaming else "result"

    def check(value: Any) -> Any:
        try:
            return adapter.dump_python(_validate(adapter, value), mode="json")
        except ValidationError as exc:
            raise TypeError(
                f"{method} gave a {what} that does not fit its annotation: {describe(what, exc, '')}"
            ) from None

    return check


# -- building a check ------------------------------------------------------------------------------
def _resolve(fn: Callable[..., Any], name: str, annotation: Any) -> Any:
    """A parameter's (or the return's) annotation, with a string one (``from __future__ import
    annotations``) evaluated in ``fn``'s module, as ``typing.get_type_hints`` does, one at a time: an
    annotation that does not resolve fails only where it is needed."""
    if not isinstance(annotation, str):
        return annotation
    holder = types.SimpleNamespace(__annotations__={name: annotation})
    globalns = getattr(inspect.unwrap(fn), "__globals__", {})
    try:
        return typing.get_type_hints(holder, globalns=globalns, include_extras=True)[name]
    except Exception as exc:
        raise TypeError(
            f"@callable {fn.__qualname__}: the annotation of {name!r} ({annotation}) does not resolve: {exc}"
        ) from exc


def _checker(fn: Callable[..., Any], name: str, annotation: Any) -> Check | None:
    """The check of one parameter; None if it accepts anything."""
    if annotation is _P.empty or annotation is Any or annotation is object:
        return None
    adapter = _adapter(fn, name, annotation)
    exact = _exact_types(annotation)
    if exact is None:
        return lambda value: _validate(adapter, value)
    if len(exact) == 1:
        only = exact[0]
        return lambda value: value if type(value) is only else _validate(adapter, value)
    return lambda value: value if type(value) in exact else _validate(adapter, value)


def _adapter(fn: Callable[..., Any], name: str, annotation: Any) -> TypeAdapter[Any]:
    try:
        return TypeAdapter(annotation)
    except PydanticUserError as exc:
        raise TypeError(
            f"@callable {fn.__qualname__}: pydantic cannot validate {name!r} ({annotation!r}): "
            f"{exc.message.splitlines()[0]} Annotate it with Any to accept anything."
        ) from exc


def _schema_of(annotation: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of values of ``annotation`` as :func:`_validate` reads them (``{}``: anything);
    the definitions it refers to are added to ``defs`` (``#/$defs/NAME``)."""
    if annotation is _P.empty or annotation is Any or annotation is object:
        return {}
    schema = TypeAdapter(annotation).json_schema(ref_template="#/$defs/{model}", mode="validation")
    defs.update(schema.pop("$defs", {}))
    return schema


def _exact_types(annotation: Any) -> tuple[type, ...] | None:
    """The exact types a value may have to pass without pydantic: those of a JSON scalar annotation
    (``int``, ``float``, ``str``, ``bool``, ``None``) or of a union of them; None for any other."""
    if annotation is None:
        return (type(None),)
    if annotation in _SCALARS:
        return (annotation,)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        members = typing.get_args(annotation)
        if all(m in _SCALARS for m in members):
            return tuple(members)
    return None


def _validate(adapter: TypeAdapter[Any], value: Any) -> Any:
    """Validate strictly, as JSON (see the module's rules)."""
    try:
        data = orjson.dumps(value)
    except TypeError:  # no JSON form (an in-process caller's object): validated as it is
        return adapter.validate_python(value, strict=True)
    return adapter.validate_json(data, strict=True)
