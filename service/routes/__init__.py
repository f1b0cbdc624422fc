"""HTTP routes, one module per resource, each with the pydantic schemas it uses."""

from pydantic import BaseModel, ConfigDict

JSON_BODY = ConfigDict(extra="forbid", strict=True)
"""A JSON body's model: its own fields only, each of the JSON type its schema states (strict:
``"5"`` is not an integer, ``0`` not a boolean), so that it accepts what the schema says."""


class FromAttributes(BaseModel):
    """A response model built from an object's attributes: ``Model.model_validate(obj)``."""

    model_config = ConfigDict(from_attributes=True)
