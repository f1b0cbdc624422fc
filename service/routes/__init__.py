"""HTTP routes, one module per resource, each with the pydantic schemas it uses."""

from pydantic import BaseModel, ConfigDict


class FromAttributes(BaseModel):
    """A response model built from an object's attributes: ``Model.model_validate(obj)``."""

    model_config = ConfigDict(from_attributes=True)
