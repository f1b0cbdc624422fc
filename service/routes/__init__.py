"""HTTP routes, one module per resource, each with the pydantic schemas it uses."""
