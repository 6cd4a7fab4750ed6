"""The one alias for JSON-shaped data, in every package: a JSON object built to be written
(an audit line, a report row, a model file's metadata). Its values are `object`: code that reads a
field narrows it with `isinstance`, or with `cast` where the writer already fixes the shape. Data with
a fixed shape gets a TypedDict or a pydantic model instead."""
from __future__ import annotations

from typing import TypeAlias

__all__ = ["JsonObject"]

JsonObject: TypeAlias = dict[str, object]
