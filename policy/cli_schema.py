"""`run.py schema`: the Decision's JSON Schema."""
from __future__ import annotations

import json

from .decision import decision_json_schema


def cli(argv: list[str]) -> int:
    print(json.dumps(decision_json_schema(), indent=2))
    return 0
