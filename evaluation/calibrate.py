"""`run.py calibrate`: fit the policy's thresholds for one KB on its gold cases.

Cases are split (stratified by bucket, seeded) into dev and test. A modest grid over the thresholds
the scorer's probability is compared with (what is related, which sections are compared for
conflicts, which decide a facet) is scored on dev by the eval's cost score (ties: fewer unsafe
answers, then the current setting); both splits are reported before and after, so an overfit shows
up on test. Retrieval does not depend on the thresholds, so each distinct search is run once and
cached for the whole sweep. With `--write` the chosen thresholds go to `<kb>/_policy.yaml`, which
`Engine.load` merges last, but only when they are no less safe on the held-out test split: neither
more unsafe answers nor a higher cost there (`--force` writes anyway, saying so)."""
from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Collection, Literal, Mapping, NotRequired, TypedDict, cast

import yaml

from kb.loader import kb_dir_error
from kb.models import RetrievalResult, RetrievalUnavailable
from kb.retrieve import Retriever
from policy.config import KB_OVERRIDE_NAME, PolicyConfig, PolicyConfigError
from policy.engine import Engine

from .cases import Case, CasesError, load_cases
from .evaluate import check_kb_loaded, evaluate, one_line, scratch
from .metrics import Metrics

# Candidate values around the shipped defaults: 3^4 = 81 settings, a minute on 2 cores. The answer
# threshold is not here: it follows from the costs.
GRID: dict[str, list[float]] = {
    "related_p": [0.25, 0.35, 0.45],
    "conflict_p": [0.40, 0.50, 0.60],
    "facet_margin": [0.20, 0.30, 0.40],
    "facet_floor": [0.25, 0.35, 0.45],
}
ReportKey = Literal["cost", "unsafe_answers", "action_accuracy", "case_pass_rate", "over_abstain_rate"]
REPORT_KEYS: tuple[ReportKey, ...] = ("cost", "unsafe_answers", "action_accuracy", "case_pass_rate",
                                      "over_abstain_rate")
Brief = dict[str, "float | None"]  # REPORT_KEYS of one split's metrics
# (query, role, facets, date, k, faults): what makes two searches the same
SearchKey = tuple[str, str, tuple[tuple[str, str], ...], "dt.date | None", int, tuple[str, ...]]


class Side(TypedDict):
    """The thresholds before or after, and their metrics on each split."""

    thresholds: dict[str, float]
    dev: Brief
    test: Brief


class Report(TypedDict):
    """What `calibrate()` returns (and `--json` prints)."""

    seed: int
    dev_cases: int
    test_cases: int
    settings_tried: int
    sweep_s: float
    retrieval_cache: dict[str, int]
    before: Side
    after: Side
    changed: bool
    written: NotRequired[str]  # the override file, with --write


def split_cases(cases: list[Case], dev_fraction: float = 0.5, seed: int = 0) -> tuple[list[Case], list[Case]]:
    """Stratified by bucket: each bucket contributes round(n * dev_fraction) cases to dev (at least
    one to each side when it has two or more). Deterministic for a seed; order kept within a split."""
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"--dev-fraction must be between 0 and 1, got {dev_fraction}")
    rng = random.Random(seed)
    by_bucket: dict[str, list[Case]] = {}
    for c in cases:
        by_bucket.setdefault(c.bucket, []).append(c)
    dev_ids: set[str] = set()
    for bucket in sorted(by_bucket):
        ids = [c.id for c in by_bucket[bucket]]
        rng.shuffle(ids)
        n = round(len(ids) * dev_fraction)
        if len(ids) >= 2:
            n = min(max(n, 1), len(ids) - 1)
        dev_ids.update(ids[:n])
    return [c for c in cases if c.id in dev_ids], [c for c in cases if c.id not in dev_ids]


class CachingRetriever:
    """Wraps a Retriever: identical searches (query, role, facets, date, k, faults) are answered
    from memory, failures included. Everything else passes through."""

    def __init__(self, inner: Retriever):
        self._inner = inner
        self._cache: dict[SearchKey, RetrievalResult | RetrievalUnavailable] = {}
        self.hits = 0
        self.misses = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def search(self, query: str, *, role: str = "public", facets: dict[str, str] | None = None,
               on_date: dt.date | None = None, k: int = 8, faults: Collection[str] = ()) -> RetrievalResult:
        key: SearchKey = (query, role, tuple(sorted((facets or {}).items())), on_date, k, tuple(sorted(faults)))
        if key in self._cache:
            self.hits += 1
            value = self._cache[key]
        else:
            self.misses += 1
            try:
                value = self._inner.search(query, role=role, facets=facets, on_date=on_date, k=k, faults=faults)
            except RetrievalUnavailable as exc:
                value = exc
            self._cache[key] = value
        if isinstance(value, RetrievalUnavailable):
            raise RetrievalUnavailable(value.reason)
        return value


def grid_configs(base: PolicyConfig, grid: dict[str, list[float]] = GRID) -> list[PolicyConfig]:
    """The current setting first, then every consistent combination of the grid (a section compared
    for conflicts is at least related to the question)."""
    out = [base]
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
        t = dict(zip(keys, values))
        if "conflict_p" in t and "related_p" in t and t["conflict_p"] < t["related_p"]:
            continue
        out.append(base.with_thresholds(**t))
    return out


def _score(metrics: Metrics) -> tuple[float, int]:
    cost = metrics["cost"] if metrics["cost"] is not None else 0.0
    return (round(cost, 6), metrics["unsafe_answers"])


def _brief(m: Metrics) -> Brief:
    return {k: m.get(k) for k in REPORT_KEYS}


def calibrate(engine: Engine, cases: list[Case], *, seed: int = 0, dev_fraction: float = 0.5,
              grid: dict[str, list[float]] = GRID, progress: bool = False) -> Report:
    """Sweep the grid on dev; return the chosen thresholds and before/after metrics of both splits."""
    dev, test = split_cases(cases, dev_fraction, seed)
    if not dev or not test:
        raise ValueError(f"need cases on both sides of the split (dev {len(dev)}, test {len(test)})")
    cached = engine.with_config(engine.config)
    caching = CachingRetriever(engine.retriever)
    cached.retriever = cast(Retriever, caching)  # stands in for it: search cached, the rest passed through
    configs = grid_configs(engine.config, grid)
    t0 = time.perf_counter()
    best_cfg, best_score, best_dev = None, None, None
    before_dev = None
    for i, cfg in enumerate(configs):
        _, m = evaluate(scratch(cached.with_config(cfg)), dev)
        if i == 0:
            before_dev = m
        score = _score(m)
        if best_score is None or score < best_score:  # strict: ties keep the earlier (current first)
            best_cfg, best_score, best_dev = cfg, score, m
        if progress and ((i + 1) % 20 == 0 or i + 1 == len(configs)):
            print(f"\r{i + 1}/{len(configs)} settings, best dev cost {best_score[0]:.3f}",
                  end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    assert best_cfg is not None and before_dev is not None and best_dev is not None
    _, before_test = evaluate(scratch(cached.with_config(engine.config)), test)
    _, after_test = evaluate(scratch(cached.with_config(best_cfg)), test)
    tuned = list(grid)
    return {
        "seed": seed, "dev_cases": len(dev), "test_cases": len(test), "settings_tried": len(configs),
        "sweep_s": round(time.perf_counter() - t0, 1),
        "retrieval_cache": {"searches": caching.misses, "reused": caching.hits},
        "before": {"thresholds": {k: getattr(engine.config.thresholds, k) for k in tuned},
                   "dev": _brief(before_dev), "test": _brief(before_test)},
        "after": {"thresholds": {k: getattr(best_cfg.thresholds, k) for k in tuned},
                  "dev": _brief(best_dev), "test": _brief(after_test)},
        "changed": best_cfg is not configs[0],
    }


class LessSafe(ValueError):
    """The fitted setting does worse than the current one on the held-out split."""


def safer_or_equal(report: Report) -> str | None:
    """Why writing the fitted setting would make the KB less safe (None when it would not)."""
    before, after = report["before"]["test"], report["after"]["test"]
    if (after["unsafe_answers"] or 0) > (before["unsafe_answers"] or 0):
        return f"unsafe answers on the test split would rise {before['unsafe_answers']} -> {after['unsafe_answers']}"
    if (after["cost"] or 0.0) > (before["cost"] or 0.0) + 1e-9:
        return f"cost on the test split would rise {before['cost']} -> {after['cost']}"
    return None


def write_override(kb_dir: Path, report: Report) -> Path:
    """Write (or update) `<kb>/_policy.yaml`: its thresholds section replaced, other keys kept."""
    path = kb_dir / KB_OVERRIDE_NAME
    data: dict[str, object] = {}
    if path.is_file():
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise PolicyConfigError(f"{path}: cannot update, invalid YAML: {str(exc).splitlines()[0]}") from exc
        if not isinstance(data, dict):
            raise PolicyConfigError(f"{path}: cannot update, not a YAML mapping")
    old = cast("Mapping[str, object]", data.get("thresholds") or {})  # a mapping in a valid file; ** rejects the rest
    data["thresholds"] = {**old, **report["after"]["thresholds"]}
    a, b = report["after"], report["before"]
    header = (
        f"# Written by `run.py calibrate` on {dt.date.today().isoformat()} (seed {report['seed']}; "
        f"dev {report['dev_cases']} cases, test {report['test_cases']} cases).\n"
        f"# dev cost {b['dev']['cost']} -> {a['dev']['cost']}, unsafe {b['dev']['unsafe_answers']} -> "
        f"{a['dev']['unsafe_answers']}; test cost {b['test']['cost']} -> {a['test']['cost']}, "
        f"unsafe {b['test']['unsafe_answers']} -> {a['test']['unsafe_answers']}.\n")
    path.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def format_report(r: Report) -> str:
    lines = [f"split: dev {r['dev_cases']} cases, test {r['test_cases']} cases (seed {r['seed']}); "
             f"{r['settings_tried']} settings in {r['sweep_s']} s "
             f"({r['retrieval_cache']['searches']} searches, {r['retrieval_cache']['reused']} reused)", ""]
    lines.append(f"{'threshold':<20}{'before':>10}{'after':>10}")
    for k, v in r["before"]["thresholds"].items():
        lines.append(f"{k:<20}{v:>10}{r['after']['thresholds'][k]:>10}")
    lines.append("")
    lines.append(f"{'metric':<20}{'dev before':>12}{'dev after':>12}{'test before':>13}{'test after':>12}")
    for k in REPORT_KEYS:
        vals = [r["before"]["dev"][k], r["after"]["dev"][k], r["before"]["test"][k], r["after"]["test"][k]]
        lines.append(f"{k:<20}" + "".join(f"{'-' if v is None else v:>12}" for v in vals))
    if not r["changed"]:
        lines.append("\nno setting beats the current thresholds on dev")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py calibrate", description="Fit policy thresholds on gold cases.")
    p.add_argument("--kb", required=True, help="knowledge base directory")
    p.add_argument("--cases", required=True, help="cases file (YAML or JSONL)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dev-fraction", type=float, default=0.5)
    p.add_argument("--write", action="store_true", help=f"write the thresholds to <kb>/{KB_OVERRIDE_NAME} "
                                                       "(refused when the test split gets less safe)")
    p.add_argument("--force", action="store_true", help="with --write: write even when less safe on test")
    p.add_argument("--policy-file", help="policy YAML merged over the default")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object (last line)")
    return p


def cli(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    kb = Path(args.kb)
    state_dir = tempfile.mkdtemp(prefix="voice-agent-calibrate-")
    try:
        if err := kb_dir_error(kb):
            raise CasesError(err)
        cases = load_cases(args.cases)
        split_cases(cases, args.dev_fraction, args.seed)  # validates the fraction before loading models
        engine = Engine.load(kb, policy_file=args.policy_file, state_dir=state_dir)
        check_kb_loaded(engine, kb)
        report = calibrate(engine, cases, seed=args.seed, dev_fraction=args.dev_fraction, progress=not args.json and sys.stderr.isatty())
        if args.write:
            worse = safer_or_equal(report)
            if worse and not args.force:
                raise LessSafe(f"not written: {worse} (use --force to write anyway)")
            if worse:
                print(f"warning: writing although {worse} (--force)", file=sys.stderr)
            report["written"] = str(write_override(kb, report))
        if args.json:
            print(json.dumps(report))
        else:
            print(format_report(report))
            if args.write:
                print(f"\nwrote {report['written']}")
        return 0
    except LessSafe as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (CasesError, PolicyConfigError, ValueError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a CLI reports one line, never a traceback
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
