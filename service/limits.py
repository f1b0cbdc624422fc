"""What a request may hold, declared once on the request models' fields: the validation and the
published OpenAPI schema are one mechanism.

A field annotated with a rule of this module (``texts: TextList``, ``Annotated[int, TopK()]``)
is checked against, and documented with, the :class:`Limits` of the app that serves it: the
settings' limits (texts per request, characters per text, k) and, once the bundle and index are
loaded, what they serve (:class:`Served`: prefix dims, index kinds, the model's name and hash,
its vocabulary). :class:`LimitsMiddleware` binds an app's limits for each request it answers,
and :func:`limits_bound` while its schema is built. An app without settings (the committed
``openapi/openapi.json``) has the default settings' limits and no bundle: the bundle's own values
are then described in words, not enumerated.

A broken rule is a 422 in the service's one error shape, whose message names the field and the
limit (``texts.1 has 9000 characters; the limit is 8192``): the rule raises a pydantic error of
type :data:`RULE_ERROR`, and :mod:`service.errors` prefixes its message with the field.

Bad input never reaches the model: an empty or blank text, too many texts, too long a text, a
string that is not valid Unicode (a lone surrogate, which JSON allows), a token id outside the
vocabulary, a dimension or index that is not served. Rules between fields (``dims`` or
``granularity``, C2F's options, ids repeated within one request) cannot be stated by JSON Schema;
they stay with the code that uses the fields, and their fields' descriptions say them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import BeforeValidator, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema
from starlette.types import ASGIApp, Receive, Scope, Send

from service.settings import Settings

RULE_ERROR = "rule"
"""The pydantic error type of a broken rule; its message follows the field's name."""
MAX_ID_CHARS = 256
MAX_LOOKUP_IDS = 1000
"""Ids per ``POST /documents/lookup``: one SQLite query each, a body of at most ~256 KB."""
NON_BLANK = re.compile(r"[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
"""A text must match this somewhere: a character that is not whitespace as ``str.strip`` has
it. Spelled out, because ``\\s`` means less in JSON Schema's regular expressions (ECMA-262)
than in Python's: ``\\S`` would let through texts that ``strip`` empties."""
DOT_SEGMENT = re.compile(r"(^|/)\.\.?(/|$)")
"""``.`` or ``..`` between slashes or the ends of a document id."""
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _default(name: str) -> Any:
    return Settings.model_fields[name].default


@dataclass(frozen=True)
class Served:
    """What the loaded bundle and index serve."""

    model: str
    bundle_hash: str
    dim: int
    prefix_dims: tuple[int, ...]
    index_kinds: tuple[str, ...]
    """The kinds built, the default first."""
    indexed_dims: tuple[int, ...]
    """The prefixes with an index (coarse, shortlist, fine)."""
    scorings: tuple[str, ...]
    vocabulary_size: int
    max_tokens: int


@dataclass(frozen=True)
class Limits:
    """The limits requests are checked against and the schema states; ``served`` is None until
    the bundle and index are loaded."""

    max_texts: int = _default("max_texts")
    max_chars: int = _default("max_chars")
    max_k: int = _default("max_k")
    default_k: int = _default("default_k")
    served: Served | None = None

    @classmethod
    def of(cls, settings: Settings | None, served: Served | None = None) -> Limits:
        """The limits of ``settings`` (the defaults without any) and of what is served."""
        if settings is None:
            return cls(served=served)
        return cls(
            settings.max_texts, settings.max_chars, settings.max_k, settings.default_k, served
        )


DEFAULT_LIMITS = Limits()
"""The default settings' limits, without a bundle."""
_CURRENT: ContextVar[Limits] = ContextVar("limits", default=DEFAULT_LIMITS)


def current_limits() -> Limits:
    """The limits of the app whose request (or schema) is being handled."""
    return _CURRENT.get()


@contextmanager
def limits_bound(limits: Limits) -> Iterator[None]:
    """Validate and document with ``limits`` inside the block."""
    token = _CURRENT.set(limits)
    try:
        yield
    finally:
        _CURRENT.reset(token)


class LimitsMiddleware:
    """Binds ``app.state.limits`` for each HTTP request of the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with limits_bound(scope["app"].state.limits):
            await self.app(scope, receive, send)


class Broken(Exception):
    """A rule is broken: ``problem`` follows the field's name in the message; ``at`` names a
    part of the field (``.3``) when the problem is there."""

    def __init__(self, problem: str, at: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.at = at


class Rule:
    """A check of a field's value and the JSON Schema keywords that state it, both read from
    the current :class:`Limits`. Used as ``Annotated[type, SomeRule()]``; the type's own
    validation runs first (``wraps = False``), or the rule wraps it (``wraps = True``: a count
    checked before the items are)."""

    wraps = False

    def check(self, value: Any, limits: Limits) -> None:
        """Raise :class:`Broken` if ``value`` breaks the rule."""

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        """Add the rule's keywords to the JSON Schema of the annotated type."""

    def _checked(self, value: Any) -> Any:
        try:
            self.check(value, current_limits())
        except Broken as broken:
            raise PydanticCustomError(
                RULE_ERROR, "{problem}", {"problem": broken.problem, "at": broken.at}
            ) from None
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        schema = handler(source)
        if self.wraps:

            def wrapped(value: Any, validate: Callable[[Any], Any]) -> Any:
                return validate(self._checked(value))

            return core_schema.no_info_wrap_validator_function(wrapped, schema)
        return core_schema.no_info_after_validator_function(self._checked, schema)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        self.document(json_schema, current_limits())
        return json_schema


def text_problem(text: str, max_chars: int) -> str | None:
    """Why ``text`` cannot be embedded (blank, too long, not Unicode), or None."""
    if not NON_BLANK.search(text):
        return "is empty or only whitespace"
    if len(text) > max_chars:
        return f"has {len(text)} characters; the limit is {max_chars}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds a lone surrogate)"
    return None


def _document_text(schema: JsonSchemaValue, max_chars: int) -> None:
    schema.update(minLength=1, maxLength=max_chars, pattern=NON_BLANK.pattern)


class TextRule(Rule):
    """A text to embed: not blank, at most ``max_chars`` characters (the settings' by
    default), valid Unicode."""

    def __init__(self, max_chars: int | None = None) -> None:
        self.max_chars = max_chars

    def _limit(self, limits: Limits) -> int:
        return limits.max_chars if self.max_chars is None else self.max_chars

    def check(self, value: str, limits: Limits) -> None:
        problem = text_problem(value, self._limit(limits))
        if problem is not None:
            raise Broken(problem)

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        _document_text(schema, self._limit(limits))


class DocumentIdRule(TextRule):
    """A document id: a text of at most :data:`MAX_ID_CHARS` characters without ``.`` or
    ``..`` as a path segment, which URL clients remove from ``/documents/{id}`` (RFC 3986)."""

    def __init__(self) -> None:
        super().__init__(MAX_ID_CHARS)

    def check(self, value: str, limits: Limits) -> None:
        super().check(value, limits)
        if DOT_SEGMENT.search(value):
            raise Broken(
                "has '.' or '..' as a path segment; URL clients drop those from "
                "/documents/{id}, so the document could not be read or deleted"
            )

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        super().document(schema, limits)
        schema["not"] = {"pattern": DOT_SEGMENT.pattern}


class PerRequest(Rule):
    """A list of texts, documents or queries: at most ``max_texts`` items."""

    wraps = True

    def check(self, value: Any, limits: Limits) -> None:
        if isinstance(value, list) and len(value) > limits.max_texts:
            raise Broken(f"has {len(value)} items; the limit is {limits.max_texts} per request")

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        schema["maxItems"] = limits.max_texts


class TopK(Rule):
    """Hits per query: 1 to ``max_k``."""

    def check(self, value: int, limits: Limits) -> None:
        if not 1 <= value <= limits.max_k:
            raise Broken(f"must be between 1 and {limits.max_k}, got {value}")

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        schema.update(minimum=1, maximum=limits.max_k)


def _listed(values: Sequence[object]) -> str:
    return ", ".join(map(str, values))


class PrefixDims(Rule):
    """Prefix dimensions, one (``int``) or several (a list of distinct ones): each one of the
    bundle's trained prefixes."""

    def check(self, value: int | list[int], limits: Limits) -> None:
        dims = [value] if isinstance(value, int) else value
        if not dims:
            raise Broken("is empty: give at least one dimension")
        if len(set(dims)) != len(dims):
            raise Broken("repeats a dimension")
        if limits.served is None:
            return
        unknown = [dim for dim in dims if dim not in limits.served.prefix_dims]
        if unknown:
            raise Broken(
                f"asks for dimension(s) {_listed(unknown)}, which this model does not serve; "
                f"allowed: {_listed(limits.served.prefix_dims)}"
            )

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        dims = list(limits.served.prefix_dims) if limits.served is not None else None
        for branch in schema.get("anyOf", [schema]):
            if branch.get("type") == "integer" and dims is not None:
                branch["enum"] = dims
            elif branch.get("type") == "array":
                branch.update(minItems=1, uniqueItems=True)
                if dims is not None:
                    branch["items"]["enum"] = dims


class BuiltIndex(Rule):
    """An index kind that was built."""

    def check(self, value: str, limits: Limits) -> None:
        if limits.served is not None and value not in limits.served.index_kinds:
            raise Broken(
                f"{value!r} is not built; built: {_listed(limits.served.index_kinds)} "
                "(set FRACTAL_INDEX_KINDS)"
            )

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        if limits.served is not None:
            schema["enum"] = list(limits.served.index_kinds)


class EnabledScoring(Rule):
    """A scoring the collection has indexes for (``sfs`` needs SFS enabled)."""

    def check(self, value: str, limits: Limits) -> None:
        if limits.served is not None and value not in limits.served.scorings:
            raise Broken(
                f"{value!r} is not enabled: the bundle has no fragment_dim and FRACTAL_SFS is off"
            )

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        if limits.served is not None:
            schema["enum"] = list(limits.served.scorings)


class IndexedPrefix(Rule):
    """C2F's shortlist prefix: a trained prefix with an index (which kinds, the search
    checks)."""

    def check(self, value: int, limits: Limits) -> None:
        served = limits.served
        if served is None:
            return
        if value not in served.prefix_dims:
            raise Broken(
                f"{value} is not a trained prefix; allowed: {_listed(served.prefix_dims)}"
            )
        if value not in served.indexed_dims:
            raise Broken(
                f"{value} has no index to shortlist from; the indexed prefixes are "
                f"{_listed(served.indexed_dims)} (the coarse and shortlist prefixes get "
                "FRACTAL_INDEX_KINDS, the fine one FRACTAL_FINE_INDEX_KINDS)"
            )

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        if limits.served is not None:
            schema["enum"] = list(limits.served.indexed_dims)


class ServedModel(Rule):
    """The served bundle's name. Documented only: another name is OpenAI's 404
    ``model_not_found``, which the route answers."""

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        if limits.served is not None:
            schema["enum"] = [limits.served.model]


class ServedBundleHash(Rule):
    """The content hash of the served bundle: vectors of another cannot be searched."""

    def check(self, value: str, limits: Limits) -> None:
        served = limits.served
        if served is not None and value != served.bundle_hash:
            raise Broken(
                f"{value[:12]!r}… is not the served bundle's ({served.bundle_hash[:12]}…, "
                f"{served.model!r}): vectors of another bundle cannot be searched with this one"
            )

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        if limits.served is not None:
            schema["enum"] = [limits.served.bundle_hash]


class FullVector(Rule):
    """A full embedding of the served bundle: its ``dim`` values, each a finite float32."""

    def check(self, value: list[float], limits: Limits) -> None:
        if limits.served is not None and len(value) != limits.served.dim:
            raise Broken(
                f"has {len(value)} values; the served bundle's vectors have {limits.served.dim}"
            )
        if not all(math.isfinite(number) for number in value):
            raise Broken("holds NaN or infinity")
        if any(abs(number) > FLOAT32_MAX for number in value):
            raise Broken(f"holds a value beyond float32's range (±{FLOAT32_MAX:.6g})")

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        schema["items"].update(minimum=-FLOAT32_MAX, maximum=FLOAT32_MAX)
        if limits.served is not None:
            schema.update(minItems=limits.served.dim, maxItems=limits.served.dim)


WRONG_INPUT = (
    "must be a string, a list of strings, a list of token ids or a list of lists of token ids "
    "(one kind per request)"
)


def _is_int(value: object) -> bool:
    """A JSON integer: ``1`` or ``1.0`` (JSON Schema's ``integer``), not ``true``."""
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


class OpenAIInputRule(Rule):
    """The OpenAI embeddings ``input``: a text, a list of texts, one text as a list of token
    ids, or a list of such lists; at most ``max_texts`` of them. Token ids must be in the
    vocabulary, and a list of them at most the backbone's ``max_tokens`` long: the ids are the
    sequence the encoder reads, nothing is added or cut.

    The rule checks the types itself, so that a wrong value gets one message rather than one
    per kind of input it is not."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._checked, core_schema.any_schema())

    def check(self, value: Any, limits: Limits) -> None:
        if isinstance(value, str):
            self._text(value, "", limits)
            return
        if not isinstance(value, list) or not value:
            if isinstance(value, list):
                raise Broken("is empty: give at least one text or token array")
            raise Broken(WRONG_INPUT)
        if all(_is_int(item) for item in value):
            self._tokens(value, "", limits)
            return
        if len(value) > limits.max_texts:
            raise Broken(f"has {len(value)} items; the limit is {limits.max_texts} per request")
        if all(isinstance(item, str) for item in value):
            for position, text in enumerate(value):
                self._text(text, f".{position}", limits)
        elif all(isinstance(item, list) for item in value):
            for position, tokens in enumerate(value):
                if not all(_is_int(token) for token in tokens):
                    raise Broken("must hold only integer token ids", f".{position}")
                self._tokens(tokens, f".{position}", limits)
        else:
            raise Broken(WRONG_INPUT)

    @staticmethod
    def _text(text: str, at: str, limits: Limits) -> None:
        problem = text_problem(text, limits.max_chars)
        if problem is not None:
            raise Broken(problem, at)

    @staticmethod
    def _tokens(tokens: list[int], at: str, limits: Limits) -> None:
        if not tokens:
            raise Broken("is empty: give at least one token id", at)
        served = limits.served
        if served is None:
            return
        if len(tokens) > served.max_tokens:
            raise Broken(
                f"has {len(tokens)} token ids; the limit is {served.max_tokens} (the model's "
                "max tokens)",
                at,
            )
        outside = [token for token in tokens if not 0 <= token < served.vocabulary_size]
        if outside:
            raise Broken(
                f"holds token id {outside[0]}, outside this model's vocabulary (0 to "
                f"{served.vocabulary_size - 1})",
                at,
            )

    def document(self, schema: JsonSchemaValue, limits: Limits) -> None:
        text: JsonSchemaValue = {"type": "string"}
        _document_text(text, limits.max_chars)
        token: JsonSchemaValue = {"type": "integer", "minimum": 0}
        tokens: JsonSchemaValue = {"type": "array", "items": token, "minItems": 1}
        if limits.served is not None:
            token["maximum"] = limits.served.vocabulary_size - 1
            tokens["maxItems"] = limits.served.max_tokens
        batch = {"minItems": 1, "maxItems": limits.max_texts}
        schema.clear()
        schema["anyOf"] = [
            text,
            {"type": "array", "items": text, **batch},
            tokens,
            {"type": "array", "items": tokens, **batch},
        ]


def _integral(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


JsonInt = Annotated[int, BeforeValidator(_integral)]
"""An integer as JSON Schema has it: ``35`` or ``35.0``, in a strict model too (not ``"35"``)."""
Text = Annotated[str, TextRule()]
TextList = Annotated[list[Text], PerRequest()]
DocumentId = Annotated[str, DocumentIdRule()]
OpenAIInput = Annotated[str | list[str] | list[int] | list[list[int]], OpenAIInputRule()]
