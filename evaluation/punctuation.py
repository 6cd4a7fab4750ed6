"""Does punctuation decide? Every case is asked again with its punctuation marks removed, as a
transcript that runs its sentences together gives it (or, `final`, with each turn's final mark
swapped: "?" for "." and back), and each turn's action is compared with the action for the words as
written. The same words should get the same action; the count of turns that change (and of those,
how many go from right to wrong) measures how far they do not."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from policy.engine import Engine

from .cases import Case
from .evaluate import run_text_case
from .metrics import CaseResult

# a mark that ends a sentence or a clause (not the "." in "7.50" or the "-" in "set-up")
_MARKS = re.compile(r"[,.;:!?]+(?=\s|$)")


def unpunctuated(text: str) -> str:
    return " ".join(_MARKS.sub(" ", text).split())


def final_mark_swapped(text: str) -> str:
    """The same words ending in the other mark: "?" for "." or "!", "." for "?", "?" where there is none."""
    t = text.rstrip()
    if t.endswith("?"):
        return t[:-1] + "."
    return (t[:-1] if t.endswith((".", "!")) else t) + "?"


# what a case is asked again as: every mark removed, or only its turns' final marks swapped
VARIANTS = {"marks": unpunctuated, "final": final_mark_swapped}


def asked_again(case: Case, variant: str = "marks") -> Case:
    """The case with every caller turn as the same words, changed as `variant` says."""
    change = VARIANTS[variant]
    return case.model_copy(update={"question": None, "turns": [change(t) for t in case.caller_turns]})


@dataclass
class PunctuationShift:
    turns: int = 0  # scored turns compared
    changed: int = 0  # of those, turns whose action changed
    right_to_wrong: int = 0
    wrong_to_right: int = 0
    examples: list[str] = field(default_factory=list)  # "case turn: action -> action"

    def add(self, other: "PunctuationShift") -> None:
        self.turns += other.turns
        self.changed += other.changed
        self.right_to_wrong += other.right_to_wrong
        self.wrong_to_right += other.wrong_to_right
        self.examples += other.examples


def compare(written: CaseResult, bare: CaseResult) -> PunctuationShift:
    out = PunctuationShift()
    for a, b in zip(written.turns, bare.turns):
        if a.expected is None or b.expected is None:
            continue
        out.turns += 1
        if a.decision.action == b.decision.action:
            continue
        out.changed += 1
        right_a, right_b = a.decision.action in a.expected, b.decision.action in b.expected
        out.right_to_wrong += right_a and not right_b
        out.wrong_to_right += right_b and not right_a
        out.examples.append(f"{written.case.id} turn {a.index + 1}: {a.decision.action.value} -> "
                            f"{b.decision.action.value}{' (now wrong)' if right_a and not right_b else ''}")
        break  # later turns follow from a different conversation: not the same words any more
    return out


def punctuation_shift(engine: Engine, cases: list[Case], variant: str = "marks") -> PunctuationShift:
    total = PunctuationShift()
    for case in cases:
        total.add(compare(run_text_case(engine, case), run_text_case(engine, asked_again(case, variant))))
    return total


def format_shifts(per: dict[str, PunctuationShift], examples: bool = False) -> str:
    lines = [f"{'domain':<14} {'turns':>6} {'changed':>8} {'right->wrong':>13} {'wrong->right':>13}", "-" * 58]
    total = PunctuationShift()
    for name, s in per.items():
        total.add(s)
        lines.append(f"{name:<14} {s.turns:>6} {s.changed:>8} {s.right_to_wrong:>13} {s.wrong_to_right:>13}")
    lines.append(f"{'ALL':<14} {total.turns:>6} {total.changed:>8} {total.right_to_wrong:>13} {total.wrong_to_right:>13}")
    if examples:
        lines += [f"  {name}/{e}" for name, s in per.items() for e in s.examples]
    return "\n".join(lines)
