"""`run.py eval`: run gold cases through the engine (text, or audio via an injected runner), score
them with `evaluation.metrics`, print a table or JSON, write one JSON line per case and a confusion-matrix
PNG and a per-bucket accuracy chart next to `--out` (with `--compare`, also the policies side by side).

Evaluation never imports `voice_agent`: the audio path (`voice_agent/eval_audio.py`) hands `cli()`
an `AudioSetup` callable, so `--audio-dir` works only through that entry point."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from kb.jsontypes import JsonObject
from kb.loader import effective_status, kb_dir_error
from kb.models import RetrievalResult
from policy.cli import iso_date, positive_seconds
from policy.config import Costs
from policy.decision import Action, Decision
from policy.engine import POLICIES, Engine, Session
from policy.numbers import number_values

from .audio_gap import channel_reader, gap_tables, reheard_line, text_twins, voice_reader
from .cases import Case, CasesError, load_cases
from .charts import chart_path, save_bucket_chart, save_compare_chart, save_confusion_png, warn_if_empty
from .metrics import CaseResult, CitedSource, Metrics, RateKey, TurnRecord, case_failures, evaluate_metrics
from .why import SHOWN_GAPS, print_failures, turn_why, vocabulary_gaps

# (case, wav path) -> (transcripts, decisions[, problems[, hearing]]): one transcript and one decision
# per detected caller turn; the optional problems (no reply audio, call errors) fail the case; the
# optional hearing gives per turn ASR's first hearing and the policy's reading.
AudioRunner = Callable[[Case, Path], "tuple[list[str], list[Decision]] | tuple[list[str], list[Decision], list[str]]"
                       " | tuple[list[str], list[Decision], list[str], list[tuple[str, str]]]"]
# (kb dir, state dir, policy file, decision date, default role) -> (engine, audio runner)
# (kb, state dir, policy file, date, default role, longest recording in seconds) -> engine and runner
AudioSetup = Callable[[str, str, "str | None", "dt.date | None", str, float], tuple[Engine, AudioRunner]]


# ---------------------------------------------------------------- running cases

def _today(engine: Engine) -> dt.date:
    for name in ("on_date", "today"):
        value = getattr(engine, name, None)
        value = value() if callable(value) else value
        if isinstance(value, dt.date):
            return value
    return dt.date.today()


def _doc_status(engine: Engine, doc_id: str, hits_status: dict[str, str]) -> str:
    if doc_id in hits_status:
        return hits_status[doc_id]
    doc = engine.kb.docs.get(doc_id)
    if doc is None:
        return "missing"
    return getattr(effective_status(doc, _today(engine), engine.kb), "value", "active")


def cited_sources(engine: Engine, decision: Decision, retrieval: RetrievalResult | None = None) -> list[CitedSource]:
    """Resolve each citation to its section text (with title, heading and version, which a message
    may repeat) and its document's effective status."""
    hits_status = {h.doc_id: getattr(h.status, "value", str(h.status)) for h in (retrieval.hits if retrieval else [])}
    out = []
    for c in decision.citations:
        section = engine.kb.section(f"{c.doc_id}#{c.section}")
        doc = engine.kb.docs.get(c.doc_id)
        if section is None or doc is None:
            out.append(CitedSource(doc_id=c.doc_id, section=c.section, status="missing"))
            continue
        text = " ".join([doc.title, *section.heading_path, section.heading, section.text, doc.version])
        out.append(CitedSource(doc_id=c.doc_id, section=c.section, text=text,
                               status=_doc_status(engine, c.doc_id, hits_status)))
    return out


def stale_numbers(retrieval: RetrievalResult | None, sources: list[CitedSource]) -> list[str]:
    """Numbers that the turn's deprecated/draft hits state and no active cited section does."""
    if retrieval is None:
        return []
    current: set[str] = set()
    for s in sources:
        if s.status == "active":
            current |= number_values(s.text)
    old: set[str] = set()
    for h in retrieval.hits:
        if getattr(h.status, "value", str(h.status)) != "active":
            old |= number_values(h.text)
    return sorted(old - current)


def _session(engine: Engine, case: Case, policy: str, default_role: str) -> Session:
    role, facets = case.role(default_role), case.caller.all_facets()
    if policy != "gated":
        return engine.session(role=role, facets=facets, policy=policy)
    return engine.session(role=role, facets=facets)


def run_text_case(engine: Engine, case: Case, *, policy: str = "gated", default_role: str = "public") -> CaseResult:
    """One case through the text path: the same session.turn + pre-speech recheck every entry point
    uses (the recheck only for the real policy). Faults are injected for this case only."""
    session = _session(engine, case, policy, default_role)
    expected = case.expected_per_turn()
    records = []
    for i, text in enumerate(case.caller_turns):
        out = session.turn(text, faults=tuple(case.faults))
        decision = out.decision
        if policy == "gated":  # what the product speaks; the baselines are measured as designed
            decision = session.recheck_before_speech(decision)
        retrieval = getattr(out, "retrieval", None)
        sources = cited_sources(engine, decision, retrieval)
        why, lacking = turn_why(decision, out.graded)
        records.append(TurnRecord(case_id=case.id, bucket=case.bucket, index=i, question=text,
                                  expected=expected[i], decision=decision, sources=sources,
                                  stale_numbers=stale_numbers(retrieval, sources), why=why, lacking=lacking))
    return CaseResult(case=case, turns=records, mode="text", failures=case_failures(case, records))


def run_audio_case_result(engine: Engine, case: Case, wav: Path, runner: AudioRunner) -> CaseResult:
    got = runner(case, wav)
    transcripts, decisions = got[0], got[1]
    problems: list[str] = list(got[2]) if len(got) > 2 else []
    hearing: list[tuple[str, str]] = list(got[3]) if len(got) > 3 else []
    expected = case.expected_per_turn()
    n_turns = len(case.caller_turns)
    # A turn the voice path never decided on (VAD merged it, ASR heard nothing) still counts: the
    # caller got no answer, scored as an empty refusal.
    silent = Decision(action=Action.refuse, message="")
    decisions_by_turn = list(decisions[:n_turns]) + [silent] * max(0, n_turns - len(decisions))
    records = []
    for i, decision in enumerate(decisions_by_turn):
        sources = cited_sources(engine, decision)
        transcript = transcripts[i] if i < len(transcripts) else None
        raw, said = hearing[i] if i < len(hearing) else ("", "")
        records.append(TurnRecord(case_id=case.id, bucket=case.bucket, index=i, question=case.caller_turns[i],
                                  transcript=transcript, heard=raw if raw and raw != transcript else None,
                                  said=said or None, expected=expected[i], decision=decision, sources=sources))
    failures = case_failures(case, records)
    if len(decisions) != n_turns:
        problems.insert(0, f"audio: {len(decisions)} decision(s) for {n_turns} caller turn(s)")
    failures = problems + failures
    return CaseResult(case=case, turns=records, mode="audio", failures=failures)


def run_cases(engine: Engine, cases: Iterable[Case], *, policy: str = "gated", default_role: str = "public",
              audio_dir: Path | None = None, audio_runner: AudioRunner | None = None,
              progress: Callable[[int, Case], None] | None = None) -> list[CaseResult]:
    """Run every case. With an audio runner, a case whose `<id>.wav` is in `audio_dir` goes through
    the voice path; cases with faults always run as text (faults cannot be injected into a call)."""
    results = []
    for n, case in enumerate(cases, 1):
        wav = audio_dir / f"{case.id}.wav" if audio_dir else None
        if audio_runner and wav and wav.is_file() and not case.faults:
            results.append(run_audio_case_result(engine, case, wav, audio_runner))
        else:
            results.append(run_text_case(engine, case, policy=policy, default_role=default_role))
        if progress:
            progress(n, case)
    return results


def scratch(engine: Engine) -> Engine:
    """The sweep's audit and handoff records go to a throwaway directory: skip the per-record fsync
    that protects real calls (it would dominate the sweep's run time)."""
    for store in (getattr(engine, "audit", None), getattr(engine, "handoffs", None)):
        if store is not None and hasattr(store, "fsync"):
            store.fsync = False
    return engine


def costs_of(engine: Engine) -> Costs:
    cfg = getattr(engine, "config", None)
    return cfg.costs if cfg is not None else Costs()


# ---------------------------------------------------------------- output

_COLUMNS: list[tuple[RateKey, str]] = [
    ("action_accuracy", "acc"), ("case_pass_rate", "pass"), ("unsafe_answer_rate", "unsafe"),
    ("over_abstain_rate", "over"), ("clarification_precision", "clarP"), ("handoff_precision", "handP"),
    ("evidence_support_rate", "evid"), ("conflict_detection_rate", "confl"),
    ("version_safety_rate", "vers"), ("cost", "cost")]


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def format_table(metrics: Metrics) -> str:
    head = f"{'bucket':<22}{'cases':>6}" + "".join(f"{short:>8}" for _, short in _COLUMNS)
    lines = [head, "-" * len(head)]
    rows = list(metrics["buckets"].items()) + [("ALL", metrics)]
    for name, m in rows:
        if name == "ALL":
            lines.append("-" * len(head))
        lines.append(f"{name[:21]:<22}{m['cases']:>6}" + "".join(f"{_fmt(m[k]):>8}" for k, _ in _COLUMNS))
    return "\n".join(lines)


def format_confusion(metrics: Metrics) -> str:
    labels = metrics["confusion"]["labels"]
    m = metrics["confusion"]["rows_expected_cols_actual"]
    lines = ["confusion (rows: expected, columns: actual)", f"{'':<10}" + "".join(f"{x:>10}" for x in labels)]
    lines += [f"{labels[i]:<10}" + "".join(f"{v:>10}" for v in row) for i, row in enumerate(m)]
    return "\n".join(lines)


def format_compare(per_policy: dict[str, Metrics]) -> str:
    names = list(per_policy)
    keys = [k for k, _ in _COLUMNS] + ["unsafe_answers", "answers"]
    lines = [f"{'metric':<26}" + "".join(f"{n:>12}" for n in names)]
    lines += [f"{k:<26}" + "".join(f"{_fmt(per_policy[n].get(k)):>12}" for n in names) for k in keys]
    return "\n".join(lines)


def write_results(results: list[CaseResult], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r.line(), ensure_ascii=False) + "\n")


def _out_for(out: Path, policy: str, compare: bool) -> Path:
    return out.with_name(f"{out.stem}.{policy}{out.suffix or '.jsonl'}") if compare else out


# ---------------------------------------------------------------- command line

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py eval", description="Run gold cases and print the metrics.")
    p.add_argument("--kb", required=True, help="knowledge base directory")
    p.add_argument("--cases", required=True, help="cases file (YAML or JSONL, CONTRACT §3)")
    p.add_argument("--audio-dir", help="directory of <case id>.wav files to run through the voice path")
    p.add_argument("--max-audio-s", type=positive_seconds, default=3600.0,
                   help="refuse a recording longer than this many seconds (default: 3600)")
    p.add_argument("--out", help="write one JSON line per case here, and beside it <stem>.confusion.png, "
                   "<stem>_buckets.png and, with --compare, <stem>_compare.png")
    p.add_argument("--policy", default="gated", choices=POLICIES, help="policy to evaluate (default: gated)")
    p.add_argument("--compare", action="store_true", help="run every policy on the same cases, side by side")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object (last line)")
    p.add_argument("--role", default="public", help="caller role for cases that do not name one")
    p.add_argument("--policy-file", help="policy YAML merged over the default")
    p.add_argument("--state-dir", help="where audits and handoffs go (default: a temporary directory)")
    p.add_argument("--no-dense", action="store_true", help="lexical retrieval only")
    p.add_argument("--failures", type=int, default=15, help="failing cases to list in the table output")
    p.add_argument("--date", type=iso_date, help="decide as of this date (default: the cases file's `today`, "
                                                 "else the real date)")
    return p


def _load_engine(args: argparse.Namespace, state_dir: str) -> Engine:
    engine = Engine.load(args.kb, policy_file=args.policy_file, state_dir=state_dir, dense=not args.no_dense,
                         on_date=args.date)
    for warning in engine.kb_warnings():
        print(f"warning: {warning}", file=sys.stderr)
    return engine


def evaluate(engine: Engine, cases: list[Case], *, policy: str = "gated", default_role: str = "public",
             audio_dir: Path | None = None, audio_runner: AudioRunner | None = None,
             progress: Callable[[int, Case], None] | None = None) -> tuple[list[CaseResult], Metrics]:
    """Run and score: (per-case results, metrics with buckets and confusion matrix)."""
    results = run_cases(engine, cases, policy=policy, default_role=default_role, audio_dir=audio_dir,
                        audio_runner=audio_runner, progress=progress)
    metrics = evaluate_metrics(results, costs_of(engine))
    metrics["policy"] = policy
    metrics["kb_version"] = getattr(engine, "kb_version", "")
    metrics["audio_cases"] = sum(r.mode == "audio" for r in results)
    metrics["vocabulary_gaps"] = dict(vocabulary_gaps(results).most_common(SHOWN_GAPS))
    return results, metrics


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_kb_loaded(engine: Engine, kb: Path) -> None:
    """An eval over an empty KB measures nothing; skipped files are worth a warning."""
    if not engine.kb.docs:
        raise CasesError(f"{kb}: no loadable documents in the knowledge base")
    problems = [p for p in getattr(engine.kb, "problems", []) if getattr(p, "fatal", True)]
    if problems:
        print(f"warning: {len(problems)} KB file(s) skipped, first: {problems[0]}", file=sys.stderr)


def cli(argv: list[str], audio_setup: AudioSetup | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cases = load_cases(args.cases)
        args.date = args.date or cases.today  # dated cases give the same result next year
        kb = Path(args.kb)
        if err := kb_dir_error(kb):
            raise CasesError(err)
        audio_dir = Path(args.audio_dir) if args.audio_dir else None
        if audio_dir and not audio_dir.is_dir():
            raise CasesError(f"{audio_dir}: audio directory not found")
        if audio_dir and audio_setup is None:
            raise CasesError("--audio-dir needs the voice path; run it through `run.py eval`")
        if audio_dir and args.compare:
            raise CasesError("--audio-dir runs the real (gated) policy only; drop --compare")
    except CasesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="voice-agent-eval-")
    try:
        return _run(args, cases, audio_dir, state_dir, audio_setup)
    except CasesError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - a CLI reports one line, never a traceback
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    finally:
        if not args.state_dir:
            shutil.rmtree(state_dir, ignore_errors=True)


def _report_compare(args: argparse.Namespace, per_policy: dict[str, Metrics]) -> None:
    """--compare: the side-by-side chart (with --out), then the table or the JSON object."""
    report: JsonObject = {"policies": per_policy}
    if args.out:
        report["compare_png"] = warn_if_empty(lambda: save_compare_chart(
            per_policy, chart_path(Path(args.out), "compare"), f"policies on {Path(args.cases).name}"))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return
    print(format_compare(per_policy))
    for name, m in per_policy.items():
        print(f"\n[{name}]\n{format_confusion(m)}")
    if args.out:
        print(f"\nwrote {report['compare_png']}")
        for m in per_policy.values():
            print(f"wrote {m['out']}, {m['png']} and {m['buckets_png']}")


def _run(args: argparse.Namespace, cases: list[Case], audio_dir: Path | None, state_dir: str,
         audio_setup: AudioSetup | None) -> int:
    runner: AudioRunner | None = None
    if audio_dir and audio_setup is not None:
        engine, runner = audio_setup(args.kb, state_dir, args.policy_file, args.date, args.role, args.max_audio_s)
    else:
        engine = _load_engine(args, state_dir)
    check_kb_loaded(engine, Path(args.kb))
    if not args.state_dir:
        scratch(engine)  # a throwaway state dir needs no per-record fsync

    def progress(n: int, case: Case) -> None:
        if runner is not None:
            print(f"\r{n}/{len(cases)} {case.id:<20}", end="", file=sys.stderr, flush=True)

    policies = list(POLICIES) if args.compare else [args.policy]
    per_policy: dict[str, Metrics] = {}
    for policy in policies:
        results, metrics = evaluate(engine, cases, policy=policy, default_role=args.role,
                                    audio_dir=audio_dir, audio_runner=runner, progress=progress)
        if runner is not None:
            print(file=sys.stderr)
        if args.out:
            out = _out_for(Path(args.out), policy, args.compare)
            write_results(results, out)
            title = f"{policy} on {Path(args.cases).name}"
            metrics["png"] = warn_if_empty(lambda: save_confusion_png(metrics, chart_path(out, "confusion"), title))
            metrics["buckets_png"] = warn_if_empty(lambda: save_bucket_chart(metrics["buckets"], chart_path(out, "buckets"),
                                                                      title))
            metrics["out"] = str(out)
        per_policy[policy] = metrics
        if not args.json and not args.compare:
            print(format_table(metrics))
            print()
            print(format_confusion(metrics))
            if runner is not None and audio_dir is not None:
                pairs = text_twins(results, lambda r: run_text_case(engine, r.case, policy=policy, default_role=args.role))
                print("\n" + gap_tables(pairs, channel_reader(audio_dir), voice_reader(audio_dir), costs_of(engine)))
                print(reheard_line(pairs))
            print_failures(results, args.failures)
            if args.out:
                print(f"\nwrote {metrics['out']}, {metrics['png']} and {metrics['buckets_png']}")
    if args.compare:
        _report_compare(args, per_policy)
    elif args.json:
        print(json.dumps(per_policy[args.policy], ensure_ascii=False))
    return 0
