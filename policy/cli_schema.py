"""`run.py schema`: the Decision's JSON Schema."""
from __future__ import annotations

import json


def cli(argv: list[str]) -> int:
    from .decision import decision_json_schema

    print(json.dumps(decision_json_schema(), indent=2))
    return 0
