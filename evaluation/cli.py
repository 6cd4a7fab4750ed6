"""`run.py eval`: one KB's cases (`--kb --cases`, see evaluation.evaluate) or a whole corpus of domains
(`--corpus DIR`), scored leave-one-domain-out, with the worst domain and a chart."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .cases import CasesError
from .corpus import Domain, Engines, Fitter, discover, format_corpus, leave_one_out, save_corpus_chart, worst
from .corpus_audio import audio_corpus, audio_corpus_json, diff_voice_runs, format_audio_corpus, load_voice_run
from .corpus_diff import DiffError, diff_runs, load_run
from .evaluate import AudioSetup
from .evaluate import cli as single_cli
from .punctuation import VARIANTS, format_shifts, punctuation_shift
from .train import fit_all


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run.py eval --corpus", description="Score every domain of a corpus, "
                                "leave-one-domain-out.")
    p.add_argument("--corpus", required=True, help="folder of domains (each: kb/ + cases.yaml, or domain.yaml)")
    p.add_argument("--sealed", help="folder of sealed domains: scored once, never trained on")
    p.add_argument("--out", help="folder for the chart (corpus.png) and the per-domain JSON (with --audio-dir: "
                   "voice.json, every spoken case beside its typed twin)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object (last line)")
    p.add_argument("--no-baselines", action="store_true", help="skip the minimal/threshold baselines' costs")
    p.add_argument("--no-refit", action="store_true",
                   help="use the shipped scorer for every domain instead of refitting without it")
    p.add_argument("--failures", action="store_true", help="list each domain's failing cases")
    p.add_argument("--audio-dir", help="folder of recordings, one sub-folder per domain "
                   "(scripts/make_domain_audio.py): score voice against text instead")
    p.add_argument("--punctuation", nargs="?", const="marks", choices=tuple(VARIANTS), default=None,
                   help="ask every case again without its punctuation marks (or, `final`, with each turn's final "
                   "mark swapped) with the shipped scorer, and count the turns whose action changes: the same "
                   "words should get the same action")
    p.add_argument("--against", metavar="CORPUS_JSON",
                   help="compare with an earlier run's corpus.json (from --out): cases gained and lost, unsafe "
                   "answers, and how many turns changed decision; with --audio-dir, an earlier voice.json: spoken "
                   "cases gained and lost, with what was heard then and now")
    p.add_argument("--min-worst", type=float, default=None,
                   help="exit 1 when the worst unsealed domain's case pass is below this (a CI gate)")
    return p


def _fitter(args: argparse.Namespace) -> Fitter | None:
    if args.no_refit:
        return None
    return fit_all


def corpus_cli(argv: list[str], audio_setup: AudioSetup | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        domains = discover(args.corpus)
        if args.sealed:
            domains += discover(args.sealed, sealed=True)
        if clash := sorted({d.name for d in domains if [e.name for e in domains].count(d.name) > 1}):
            raise CasesError(f"domain {clash[0]!r} is in both {args.corpus} and {args.sealed}: the per-domain "
                             "table names each domain once; rename one folder")
        for d in domains:
            _ = d.cases  # validate every cases file before loading any model
        if not (args.no_refit or args.punctuation) and sum(not d.sealed for d in domains) < 2:
            raise CasesError(f"{args.corpus}: leave-one-domain-out needs at least two domains to fit on; "
                             "add domains, or score with the shipped scorer (--no-refit)")
        before = load_run(args.against) if args.against and not args.audio_dir else None
        voice_before = load_voice_run(args.against) if args.against and args.audio_dir else None
    except (CasesError, DiffError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    engines = Engines()
    if args.audio_dir:
        return _audio(args, domains, engines, audio_setup, voice_before)
    if args.punctuation:
        return _punctuation(args, domains, engines)
    try:
        per = leave_one_out(domains, engines, _fitter(args), baselines=not args.no_baselines,
                            progress=lambda name: print(f"scored {name}", file=sys.stderr, flush=True))
    except ValueError as exc:  # a fit the held-in domains cannot support (e.g. no answerable section)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        save_corpus_chart(per, out / "corpus.png")
        (out / "corpus.json").write_text(json.dumps(per, indent=1, default=str), encoding="utf-8")
    if args.json:
        print(json.dumps({"domains": per, "worst": worst(per)}, default=str))
    else:
        print(format_corpus(per))
        if args.failures:
            for name, m in per.items():
                if m.get("sealed"):
                    continue  # sealed domains are never read case by case
                for cid, why in m["failures"].items():
                    print(f"  {name}/{cid}: {'; '.join(why)}")
        if before is not None:
            print("\n" + "\n".join(diff_runs(before, per).lines()))
        if args.out:
            print(f"\nwrote {Path(args.out) / 'corpus.png'} and corpus.json")
    open_ = {n: m for n, m in per.items() if not m.get("sealed")}
    if args.min_worst is not None and open_ and worst(open_)[1] < args.min_worst:
        print(f"error: worst domain {worst(open_)[0]} below {args.min_worst}", file=sys.stderr)
        return 1
    return 0


def cli(argv: list[str], audio_setup: AudioSetup | None = None) -> int:
    if "--corpus" in argv or any(a.startswith("--corpus=") for a in argv):
        return corpus_cli(argv, audio_setup)
    return single_cli(argv, audio_setup)


def _punctuation(args: argparse.Namespace, domains: list[Domain], engines: Engines) -> int:
    per = {}
    for d in domains:
        if d.sealed:
            continue  # sealed domains are never read case by case
        per[d.name] = punctuation_shift(engines.get(d), list(d.cases), args.punctuation)
        print(f"asked {d.name} again", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({n: {k: v for k, v in vars(s).items() if k != "examples"} for n, s in per.items()}))
    else:
        print(format_shifts(per, examples=args.failures))
    return 0


def _audio(args: argparse.Namespace, domains: list[Domain], engines: Engines, audio_setup: AudioSetup | None,
           before: dict[str, object] | None) -> int:
    root = Path(args.audio_dir)
    if audio_setup is None:
        print("error: --audio-dir needs the voice path; run it through `run.py eval`", file=sys.stderr)
        return 2
    if not root.is_dir():
        print(f"error: {root}: audio directory not found", file=sys.stderr)
        return 2
    scored = audio_corpus(domains, root, audio_setup, engines, _fitter(args),
                          progress=lambda name: print(f"heard {name}", file=sys.stderr, flush=True))
    if not scored:
        print(f"error: {root}: no recordings for any domain (one sub-folder per domain)", file=sys.stderr)
        return 2
    data = audio_corpus_json(scored)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "voice.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    print(json.dumps(data) if args.json else format_audio_corpus(scored, failures=args.failures))
    if before is not None and not args.json:
        print("\n" + "\n".join(diff_voice_runs(before, data)))
    if args.out and not args.json:
        print(f"\nwrote {Path(args.out) / 'voice.json'}")
    return 0
