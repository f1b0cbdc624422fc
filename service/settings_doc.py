"""Print ``docs/settings.md``, every ``FRACTAL_*`` setting with its default, its values and its
meaning, from the fields of :class:`service.settings.Settings`:
``python -m service.settings_doc > docs/settings.md``. A test keeps the file equal to this output,
as ``openapi/openapi.json`` is kept equal to the app's schema."""

from __future__ import annotations

import types
import typing
from pathlib import Path

from pydantic import SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from service.settings import ENV_PREFIX, Settings

HEADER = """# Settings

Every setting of the service is an environment variable, `FRACTAL_` and the field's name in
capitals: `bundle_dir` is `FRACTAL_BUNDLE_DIR`. Lists are comma-separated. A bad value ends the
process before it listens, with one `error: …` line naming the variable, and exit status 2.

This page is generated from the fields of `index/settings.py` (where and how collections are
stored, which `fractal import` reads too) and `service/settings.py` (`python -m
service.settings_doc > docs/settings.md`); a test keeps it equal to what the code generates.

| variable | default | values | meaning |
|---|---|---|---|
"""


def default_text(field: FieldInfo) -> str:
    """The default as a user would write it in the environment."""
    value = field.default
    if value is PydanticUndefined:
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, tuple):
        return f"`{','.join(map(str, value))}`" if value else "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def values_text(field: FieldInfo) -> str:
    """The values a field takes: its choices, or its type and bounds."""
    annotation = _unwrap(field.annotation)
    bounds = [
        f"{symbol} {getattr(constraint, name)}"
        for constraint in field.metadata
        for name, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))
        if getattr(constraint, name, None) is not None
    ]
    if typing.get_origin(annotation) is tuple:
        (item, *_) = typing.get_args(annotation)
        return f"list of {values_text(FieldInfo(annotation=item))}"
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{choice}`" for choice in typing.get_args(annotation))
    names: dict[object, str] = {
        bool: "`true` \\| `false`",
        int: "integer",
        float: "number",
        str: "text",
        Path: "path",
        SecretStr: "secret text",
    }
    name = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return ", ".join([name, *bounds])


def _unwrap(annotation: object) -> object:
    """``X | None`` as ``X``, and ``Annotated[X, …]`` as ``X``."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def render() -> str:
    """The whole page: one table row per setting, in the order the class declares them."""
    rows = [
        f"| `{ENV_PREFIX}{name.upper()}` | {default_text(field)} | {values_text(field)} | "
        f"{(field.description or '').replace('|', chr(92) + '|')} |"
        for name, field in Settings.model_fields.items()
    ]
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(render(), end="")
