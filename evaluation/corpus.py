"""The multi-domain corpus: find the domains, run each one's gold cases, and score them the way a new
user's KB would be scored: leave-one-domain-out (anything fitted is fitted on the other domains).

A domain is a folder holding `kb/` and `cases.yaml`, or a `domain.yaml` naming them
(`kb: ../../kb`, `cases: ../../cases.yaml`), so the two original fixtures join without moving."""
from __future__ import annotations

import datetime as dt
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Generic, Literal, TypeVar

import yaml

from evaluation.cases import CaseFile, CasesError, load_cases
from evaluation.evaluate import costs_of, evaluate, scratch
from evaluation.metrics import CaseResult, Metrics, RateKey
from policy.engine import Engine
from policy.scorer import Scorer
from policy.turn_probes import TurnProbes

from .corpus_diff import turn_label
from .leaks import LeakCheck

T = TypeVar("T")

# the per-domain figures the corpus table prints, in order
CorpusKey = Literal[RateKey, "unsafe_answers", "leaks", "cost_minimal", "cost_threshold"]
COLUMNS: list[tuple[CorpusKey, str]] = [
    ("case_pass_rate", "pass"), ("action_accuracy", "acc"), ("over_abstain_rate", "over"),
    ("unsafe_answers", "unsafe"), ("leaks", "leaks"), ("cost", "cost"),
    ("cost_minimal", "c.min"), ("cost_threshold", "c.thr")]


@dataclass
class Domain:
    name: str
    kb: Path
    cases_path: Path
    sealed: bool = False
    _cases: CaseFile | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        """Where the domain comes from, not its name alone: two corpora may each hold a "vet"."""
        return (self.name, str(self.kb), str(self.cases_path))

    @property
    def cases(self) -> CaseFile:
        if self._cases is None:
            self._cases = load_cases(self.cases_path)
        return self._cases


def _domain(folder: Path, sealed: bool) -> Domain | None:
    spec = folder / "domain.yaml"
    if spec.is_file():
        data = yaml.safe_load(spec.read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict) or "kb" not in data or "cases" not in data:
            raise CasesError(f"{spec}: expected a mapping with kb: and cases:")
        return Domain(folder.name, (folder / data["kb"]).resolve(), (folder / data["cases"]).resolve(), sealed)
    if (folder / "kb").is_dir() and (folder / "cases.yaml").is_file():
        return Domain(folder.name, folder / "kb", folder / "cases.yaml", sealed)
    return None


def discover(root: str | Path, sealed: bool = False) -> list[Domain]:
    """Every domain folder directly under `root`, by name."""
    base = Path(root)
    if not base.is_dir():
        raise CasesError(f"{base}: corpus directory not found")
    found = [d for f in sorted(base.iterdir()) if f.is_dir() and (d := _domain(f, sealed))]
    if not found:
        raise CasesError(f"{base}: no domains (folders with kb/ and cases.yaml, or a domain.yaml)")
    return found


class Engines:
    """One loaded engine per domain for the whole run (models and indexes load once)."""

    def __init__(self, state_root: Path | None = None, dense: bool = True):
        self._engines: dict[tuple[str, str, str], Engine] = {}
        self._state = state_root or Path(tempfile.mkdtemp(prefix="voice-agent-corpus-"))
        self.dense = dense

    def get(self, d: Domain) -> Engine:
        if d.key not in self._engines:
            state = self._state / f"{d.name}-{len(self._engines)}"  # one folder per domain, whatever its name
            engine = Engine.load(d.kb, state_dir=state, dense=self.dense, on_date=d.cases.today or dt.date.today())
            self._engines[d.key] = scratch(engine)
        return self._engines[d.key]


class PerDomain(Generic[T]):
    """Something computed from a domain once per run (what its cases teach a fit does not depend on
    what was fitted before): `compute(domain, engines)`, remembered by domain."""

    def __init__(self, compute: Callable[[Domain, "Engines"], T]):
        self._compute = compute
        self._by_domain: dict[tuple[str, str, str], T] = {}

    def get(self, domain: Domain, engines: "Engines") -> T:
        if domain.key not in self._by_domain:
            self._by_domain[domain.key] = self._compute(domain, engines)
        return self._by_domain[domain.key]


def count_leaks(engine: Engine, results: list[CaseResult]) -> tuple[int, list[str]]:
    """Turns whose message says something only documents hidden from the caller say."""
    check = LeakCheck(engine.kb)
    found = []
    for r in results:
        for t in r.turns:
            heard = " ".join(r.case.caller_turns[: t.index + 1])
            if said := check.leaks(t.decision.message, r.case.role(), heard):
                found.append(f"{r.case.id} turn {t.index + 1}: {', '.join(said[:3])}")
    return len(found), found


# the baselines each domain is also scored with, and the key their cost goes under
BASELINE_COSTS: dict[str, Literal["cost_minimal", "cost_threshold"]] = {"minimal": "cost_minimal",
                                                                        "threshold": "cost_threshold"}


def score_domain(engine: Engine, d: Domain, *, baselines: bool = True) -> tuple[Metrics, list[CaseResult]]:
    """The domain's metrics with the engine as it is (its scorer already chosen by the caller)."""
    results, m = evaluate(engine, list(d.cases))
    m["leaks"], m["leak_detail"] = count_leaks(engine, results)
    m["failures"] = {r.case.id: r.failures for r in results if not r.ok}
    m["decisions"] = {r.case.id: [turn_label(t.decision) for t in r.turns] for r in results}
    if baselines:
        for name, key in BASELINE_COSTS.items():
            _, b = evaluate(engine, list(d.cases), policy=name)
            m[key] = b["cost"]
    m["costs"] = costs_of(engine).model_dump()
    return m, results


@dataclass
class Fitted:
    """What the other domains teach, for a held-out one: the answerability scorer and, when they
    could be fitted, the turn probes (None: keep the engine's)."""

    scorer: Scorer
    probes: TurnProbes | None = None

    def apply(self, engine: Engine) -> None:
        engine.scorer = self.scorer
        if self.probes is not None:
            engine.probes = self.probes
            engine.forget_intents()


Fitter = Callable[[list[Domain], "Engines"], Fitted]  # training domains -> what the held-out one is scored with


def leave_one_out(domains: list[Domain], engines: Engines, fit: Fitter | None,
                  progress: Callable[[str], None] | None = None, baselines: bool = True) -> dict[str, Metrics]:
    """Score each domain with a scorer fitted on the other (unsealed) domains only."""
    per: dict[str, Metrics] = {}
    train_pool = [d for d in domains if not d.sealed]
    for d in domains:
        engine = engines.get(d)
        if fit is not None:
            fit([x for x in train_pool if x.name != d.name], engines).apply(engine)
        per[d.name], _ = score_domain(engine, d, baselines=baselines)
        per[d.name]["sealed"] = d.sealed
        if d.sealed:  # a sealed domain is scored, never read case by case
            per[d.name].pop("failures")
            per[d.name].pop("leak_detail")
            per[d.name].pop("decisions")
        if progress:
            progress(d.name)
    return per


def worst(per: dict[str, Metrics], key: RateKey = "case_pass_rate") -> tuple[str, float]:
    name = min(per, key=lambda n: per[n].get(key) or 0.0)
    return name, per[name].get(key) or 0.0


def format_corpus(per: dict[str, Metrics]) -> str:
    head = f"{'domain':<16}{'cases':>6}" + "".join(f"{short:>8}" for _, short in COLUMNS)
    lines = [head, "-" * len(head)]
    for name, m in per.items():
        label = f"{name}{' (sealed)' if m.get('sealed') else ''}"
        cells = "".join(f"{_fmt(m.get(k)):>8}" for k, _ in COLUMNS)
        lines.append(f"{label[:15]:<16}{m['cases']:>6}{cells}")
    open_ = {n: m for n, m in per.items() if not m.get("sealed")}
    if open_:
        name, value = worst(open_)
        lines.append(f"\nworst domain (case pass): {name} {value:.3f}")
    return "\n".join(lines)


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def save_corpus_chart(per: dict[str, Metrics], path: Path) -> Path:
    import matplotlib  # heavy, optional: only when a chart is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy, optional: same

    names = list(per)
    series: list[tuple[RateKey, str]] = [("case_pass_rate", "case pass"), ("action_accuracy", "action accuracy"),
                                         ("over_abstain_rate", "over-refusal")]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names)), 4))
    width = 0.8 / len(series)
    for i, (key, label) in enumerate(series):
        xs = [j + i * width for j in range(len(names))]
        ax.bar(xs, [per[n].get(key) or 0.0 for n in names], width, label=label)
    for j, n in enumerate(names):
        if per[n].get("unsafe_answers"):
            ax.annotate(f"{per[n]['unsafe_answers']} unsafe", (j, 1.02), fontsize=8, color="red")
    ax.set_xticks([j + width for j in range(len(names))],
                  [f"{n}{'*' if per[n].get('sealed') else ''}" for n in names], rotation=20)
    ax.set_ylim(0, 1.1)
    ax.axhline(0.92, color="grey", lw=0.8, ls="--")
    ax.set_title("leave-one-domain-out, per domain (* sealed)", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
