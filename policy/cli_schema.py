"""`run.py schema`: the Decision's JSON Schema."""
from __future__ import annotations

import argparse
import json

from .decision import decision_json_schema


def cli(argv: list[str]) -> int:
    argparse.ArgumentParser(prog="run.py schema", description="Print the Decision's JSON Schema.").parse_args(argv)
    print(json.dumps(decision_json_schema(), indent=2))
    return 0
