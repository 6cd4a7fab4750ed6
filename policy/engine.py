"""The shared part of every conversation: KB, indexes, policy config, scorer and durable stores, and
what they know per caller role (visible facets, teams, vocabulary). Every entry point (ask, eval,
replay, mic, the websocket server) drives a `Session` (policy/session.py) made here."""
from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Literal, get_args

from kb.check import suspects
from kb.loader import KnowledgeBase, load_kb, visible_to
from kb.models import Hit
from kb.retrieve import Retriever
from kb.soft_match import SoftMatcher
from kb.sound import SoundIndex

from .config import PolicyConfig, load_policy_config
from .facets import FacetReader, scoped_context
from .intents import IntentReader
from .language import normalize_text, question_focus
from .normalize import synonym_table
from .scorer import Scorer, load_scorer
from .session import AsrSignal, Session, TurnOutcome
from .session_state import SessionState, new_session_id
from .signals import facet_idioms, facet_vocabulary
from .store_api import HandoffStore
from .store_embedded import EmbeddedStore
from .turn_probes import TurnProbes, load_probes, probes_fingerprint, unfit_for

__all__ = ["Engine", "Session", "SessionState", "AsrSignal", "TurnOutcome", "UnknownRole", "POLICIES"]

PolicyName = Literal["gated", "threshold", "minimal"]  # the gated policy and the two baselines it is scored against
POLICIES: tuple[PolicyName, ...] = get_args(PolicyName)


class UnknownRole(ValueError):
    pass


class Engine:
    def __init__(self, kb: KnowledgeBase, retriever: Retriever, config: PolicyConfig,
                 state_dir: str | Path = "var", on_date: dt.date | None = None, progress: bool = False,
                 scorer: Scorer | None = None, store: HandoffStore | None = None,
                 probes: TurnProbes | None = None):
        self.kb = kb
        self.scorer = scorer or load_scorer(kb.root)  # whether a section answers (evaluation/train.py)
        # what the whole turn is: urgent, a disallowed request (evaluation/probe_fit.py)
        self.probes = load_probes() if probes is None else probes
        self.retriever = retriever
        self.config = config
        self.state_dir = Path(state_dir)
        self.on_date = on_date  # None: today, read per turn (tests fix it)
        # handoffs and audit log: JSONL files under state_dir unless a store is given (--store)
        self._given_store = store
        self.store: HandoffStore = store or EmbeddedStore(self.state_dir)
        self.handoffs = self.store.handoffs
        self.audit = self.store.audit
        self._facets_by_role: dict[str, dict[str, set[str]]] = {}
        self._soft: SoftMatcher | None = None
        self._progress = progress  # progress bars while embedding (CLI use)
        self._vocab: dict[str, list[str]] = {}
        self._sounds: dict[str, SoundIndex] = {}
        self._roles: set[str] | None = None
        # per role, from the KB and the config, which do not change under a running engine
        self._teams: dict[str, set[str]] = {}
        self._facet_phrases: dict[str, dict[str, dict[str, list[str]]]] = {}
        self._facet_idioms: dict[str, dict[str, set[str]]] = {}
        self._facet_readers: dict[str, FacetReader | None] = {}
        self._intents: IntentReader | None = None
        self._intent_memo: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
        self.synonyms = synonym_table(config.synonyms)  # the callers' phrases for KB phrases

    @classmethod
    def load(cls, kb_dir: str | Path, *, policy_file: str | Path | None = None, state_dir: str | Path = "var",
             dense: bool = True, on_date: dt.date | None = None, progress: bool | None = None,
             store: HandoffStore | None = None) -> "Engine":
        """`progress`: bars while a first-time index or embedding is built; None shows them when
        stderr is a terminal (every command), never in a pipe or a test."""
        if progress is None:
            progress = sys.stderr.isatty()
        kb = load_kb(kb_dir)
        config = load_policy_config(policy_file, kb_dir=kb_dir)
        retriever = Retriever(kb, dense=dense, progress=progress)
        retriever.attach_units(progress)
        return cls(kb, retriever, config, state_dir, on_date, progress, store=store)

    @property
    def kb_version(self) -> str:
        return self.kb.kb_version

    @property
    def policy_version(self) -> str:
        return f"{self.config.fingerprint()}/{self.scorer.fingerprint}/probes-{self._probes_fingerprint}"

    @property
    def probes(self) -> TurnProbes:
        return self._probes

    @probes.setter
    def probes(self, probes: TurnProbes) -> None:
        # hashed once here, not on each turn that reads the policy version (about 1 ms a hash)
        self._probes, self._probes_fingerprint = probes, probes_fingerprint(probes)

    def soft_matcher(self) -> SoftMatcher:
        """Word-level synonym matching for coverage; shares the retriever's embedding model. The
        KB's own words are embedded once (cached on disk with the KB version)."""
        if self._soft is None:
            soft = SoftMatcher(self.retriever.embed, threshold=self.config.thresholds.soft_match)
            if self.retriever.model_id:
                soft.prime([f"{s.heading} {s.text} {self.kb.docs[s.doc_id].title}" for s in self.kb.sections],
                           self.kb.kb_version, self.retriever.model_id, progress=self._progress)
            self._soft = soft
        return self._soft

    def with_config(self, config: PolicyConfig) -> "Engine":
        # a given store is shared; the default files get store objects of their own (a sweep's
        # `scratch` turns their fsync off without touching this engine's)
        other = Engine(self.kb, self.retriever, config, self.state_dir, self.on_date, scorer=self.scorer,
                       store=self._given_store, probes=self.probes)
        other._soft = self._soft
        return other

    def vocabulary(self, role: str = "public") -> list[str]:
        """KB terms this role may see: ASR biasing and repair of misheard words."""
        if role not in self._vocab:
            self._vocab[role] = self.retriever.vocabulary(role)
        return self._vocab[role]

    def sound_index(self, role: str = "public") -> SoundIndex:
        """Every word of the KB this role may see, and of the ways callers ask for a person, by
        sound: repairs of misheard words."""
        if role not in self._sounds:
            asks = [w for p in self.request_phrases() for w in p.split()]
            self._sounds[role] = SoundIndex(self.retriever.vocabulary(role, limit=100_000) + asks)
        return self._sounds[role]

    def request_phrases(self) -> list[str]:
        """How callers ask for a person (the policy file's examples): a second decode's prompt."""
        intent = self.config.intents.get("human_request")
        return list(intent.examples) if intent else []

    def spoken_requests(self) -> list[str]:
        """Short requests for a person as said on a phone line: weighed against a short turn's audio."""
        intent = self.config.intents.get("human_request")
        return list(intent.spoken) if intent else []

    def kb_facets(self, role: str) -> dict[str, set[str]]:
        """Facet values in the documents this role may see (restricted docs reveal nothing)."""
        if role not in self._facets_by_role:
            facets: dict[str, set[str]] = {}
            for doc in self.kb.docs.values():
                if visible_to(doc, role):
                    for k, v in doc.applies_to.items():
                        facets.setdefault(k, set()).add(str(v))
            self._facets_by_role[role] = facets
        return self._facets_by_role[role]

    def usable_probes(self) -> TurnProbes:
        """The turn probes fitted in the space of the embedding model this KB is served with."""
        unfit = unfit_for(self.probes, self.retriever.model_id)
        return {h: p for h, p in self.probes.items() if h not in unfit}

    def model_warnings(self) -> list[str]:
        """Fitted parts that were fitted on another embedding model's vectors than this KB's."""
        model = self.retriever.model_id
        if model is None:
            return []
        out = [f"turn probe {h!r} was fitted on embedding model {self.probes[h].meta['embedding']}, this KB is served "
               f"with {model}: it is not used" for h in unfit_for(self.probes, model)]
        fitted = self.scorer.meta.get("embedding")
        if fitted not in (None, model):
            out.append(f"the answerability scorer was fitted on embedding model {fitted}, this KB is served with "
                       f"{model}: its probabilities are not calibrated for it; refit it (run.py train)")
        return out

    def kb_warnings(self) -> list[str]:
        """What an operator should see at start: the load's problems, `kb check`'s suspects, and fitted
        parts that do not fit the embedding model."""
        return [str(p) for p in self.kb.problems] + [str(f) for f in suspects(self.kb)] + self.model_warnings()

    def roles(self) -> set[str]:
        """Roles this KB knows: `public` plus every role named in a document's acl."""
        if self._roles is None:
            self._roles = {"public"} | {r for d in self.kb.docs.values() for r in d.acl}
        return self._roles

    def teams(self, role: str) -> set[str]:
        """Handoff teams named by the documents this role may see."""
        if role not in self._teams:
            self._teams[role] = {d.handoff_team for d in self.kb.docs.values()
                                 if d.handoff_team and visible_to(d, role)}
        return self._teams[role]

    def facet_phrases(self, role: str) -> dict[str, dict[str, list[str]]]:
        """How a caller of this role may state each facet value (KB values + policy synonyms)."""
        if role not in self._facet_phrases:
            self._facet_phrases[role] = facet_vocabulary(self.config, self.kb_facets(role))
        return self._facet_phrases[role]

    def facet_idioms(self, role: str) -> dict[str, set[str]]:
        """One-word facet phrases in the KB's own compounds ("business days"): not caller context."""
        if role not in self._facet_idioms:
            texts = [(self.kb.docs[s.doc_id].applies_to, f"{s.heading}. {s.text}") for s in self.kb.sections
                     if visible_to(self.kb.docs[s.doc_id], role)]
            self._facet_idioms[role] = facet_idioms(self.facet_phrases(role), texts)
        return self._facet_idioms[role]

    def facet_reader(self, role: str) -> FacetReader | None:
        """Reads facets stated in everyday words (needs the dense model; None without it)."""
        if role not in self._facet_readers:
            reader = None
            if self.retriever.model_id and self.kb_facets(role):
                seen = [(self.kb.docs[s.doc_id], s) for s in self.kb.sections if visible_to(self.kb.docs[s.doc_id], role)]
                heads = [(d.applies_to, f"{d.title}. {s.heading}") for d, s in seen]
                texts = [(d.applies_to, f"{d.title}. {s.heading}. {s.text}") for d, s in seen]
                reader = FacetReader(self.facet_phrases(role), scoped_context(heads), self.retriever.embed,
                                     scoped_text=scoped_context(texts))
            self._facet_readers[role] = reader
        return self._facet_readers[role]

    def focus_scores(self, question: str, hits: list[Hit]) -> None:
        """Score each hit's units against the clause that asks, when the turn says more than that."""
        units = self.retriever.units
        focus = question_focus(question)
        if units is None or focus is None:
            return
        vec = self.retriever.embed([focus])[0]
        for h in hits:
            h.focus_scores = units.scores(h.locator, vec)

    def intents(self, text: str) -> dict[str, float]:
        """Intents this turn has by meaning (policy file `intents`), and "urgent", "disallowed" or
        "human_request" from the turn probes, which need no examples; none without the dense model."""
        return self._read_turn(text)[0]

    def urgency(self, text: str) -> float | None:
        """The urgent turn probe's probability for this turn, whatever its threshold; None without the
        probe (or the dense model)."""
        return self._read_turn(text)[1].get("urgent")

    def _read_turn(self, text: str) -> tuple[dict[str, float], dict[str, float]]:
        """(the intents found, every usable probe's probability), from one embedding of the turn."""
        if not self.retriever.model_id:
            return {}, {}
        if self._intents is None and self.config.intents:
            self._intents = IntentReader(self.config.intents, self.retriever.embed)
        key = normalize_text(text)  # a turn asks twice (as said, then as decided): one embedding
        if key not in self._intent_memo:
            if len(self._intent_memo) > 256:
                self._intent_memo.clear()
            found = self._intents.detect(key) if self._intents is not None else {}
            probes = self.usable_probes()
            read: dict[str, float] = {}
            if probes and key:
                vec = self.retriever.embed([key])[0]
                read = {head: probe.probability(vec) for head, probe in probes.items()}
                th = self.config.thresholds
                found.update({head: p for head, p in read.items() if p >= th.probe_p(head)})
            self._intent_memo[key] = (found, read)
        return self._intent_memo[key]

    def forget_intents(self) -> None:
        """Drop the turns' remembered intents (the turn probes were replaced)."""
        self._intent_memo.clear()

    def warmup(self) -> None:
        """Load what the first turn would otherwise load on the caller's time (word frequencies,
        intent examples, the soft matcher, unit scores): a previewed turn, recorded nowhere."""
        self.session().preview("how much does it cost and how long does it take")

    def session(self, role: str = "public", facets: dict[str, str] | None = None,
                session_id: str | None = None, policy: str = "gated", *,
                state: SessionState | None = None) -> "Session":
        """A new conversation, or one rebuilt from `state` (a snapshot: its role, facets and session
        id win over the other arguments)."""
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
        if state is None:
            state = SessionState(role=role, facets=dict(facets or {}), session_id=session_id or new_session_id())
        if state.role not in self.roles():
            # A typo must not silently become public access (or look like "no information").
            raise UnknownRole(f"unknown role {state.role!r}; this knowledge base knows: "
                              f"{', '.join(sorted(self.roles()))}")
        session = Session(self, state.role, dict(state.facets), state.session_id, policy)
        session.restore(state)
        return session
