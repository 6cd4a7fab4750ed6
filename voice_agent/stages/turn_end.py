"""Does a transcript read as a finished turn? Lets the call end a turn before the full
end-of-turn silence when the caller has plainly finished ("When is my bill due?"), and keep
waiting when the words so far trail off ("I want to cancel my ...")."""
from __future__ import annotations

import re

# Words a spoken sentence does not end on: it goes on after them.
_CONTINUES = frozenset("""
a an the my your our their his her its this that these those some any
and or but so because if when while although though unless until than then
to of for with from in on at by about into onto over under without between after before as
is are was were be been am do does did can could would should will shall may might must have has had
i you we they he she it me us them
not no um uh er erm hmm like well also just
""".split())
# Words a spoken question opens with.
_ASKS = frozenset("""
what what's whats when where which who whom whose why how how's is are was were am do does did
can could would should will shall may might have has
""".split())
_WH = frozenset("what when where which who why how".split())
_SUBJECTS = frozenset("i we you they he she it my our your their the".split())
_END = re.compile(r"[.?!]['\")\]]*\s*$")


def reads_complete(text: str, *, question: bool = False) -> bool:
    """True when whisper punctuated the end (., ?, !, not an ellipsis), there are at least two
    words, and the last word is not one a sentence continues after. With `question`, only a
    question will do (a question mark, or a last sentence that opens as a question does): callers
    often set the scene in a statement and then ask."""
    t = text.strip()
    if not _END.search(t) or t.rstrip("'\")] ").endswith(("...", "…")):
        return False
    if question and not t.rstrip("'\")] ").endswith("?"):
        # whisper sometimes ends a question with a full stop: "Is the store open on Sunday."
        last = re.split(r"(?<=[.?!])\s+", t)[-1]
        w = re.findall(r"[a-z']+", last.lower())
        if not w or w[0] not in _ASKS or (w[0] in _WH and len(w) > 1 and w[1] in _SUBJECTS):
            return False  # "When I paid last week." opens a clause, not a question
    words = re.findall(r"[a-z0-9']+", t.lower())
    return len(words) >= 2 and words[-1] not in _CONTINUES
