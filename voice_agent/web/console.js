// The agent console's view: the turn-by-turn history, the listening/thinking/speaking indicator,
// readable citations with their quoted passages, and the handoff panel. Rendering only: the
// protocol and audio live in app.js. Reason codes are never rendered: they are for the audit.
const $ = (id) => document.getElementById(id);

const STATE_TEXT = {
  idle: "Not in a call", connecting: "Connecting…", listening: "Listening", thinking: "Thinking…",
  speaking: "Speaking", transferred: "Transferred to a person", ended: "Call ended", failed: "Could not start",
};

// The indicator; `data-history` keeps every state it has shown, in order, so a test (or a person
// reading the DOM) can see the sequence without racing the live value.
export function setState(state, detail) {
  const s = $("status");
  if (s.dataset.state === state && !detail) return;
  s.dataset.state = state;
  const seen = s.dataset.history ? s.dataset.history.split(" ") : [];
  if (seen[seen.length - 1] !== state) s.dataset.history = [...seen, state].join(" ");
  $("status-text").textContent = detail || STATE_TEXT[state] || state;
}

export const currentState = () => $("status").dataset.state;

// "late-payment-fees" -> "Late payment fees"
export function humanize(slug) {
  const words = String(slug || "").replace(/[-_]+/g, " ").trim();
  return words ? words[0].toUpperCase() + words.slice(1) : "";
}

// A citation's readable label: the public decision carries ids, not titles.
export function citationLabel(c) {
  return [humanize(c.doc_id), humanize(c.section)].filter(Boolean).join(" — ");
}

const key = (c) => `${c.doc_id}#${c.section || ""}`;

// Evidence quotes the decision or handoff carries, by doc#section.
function quotesOf(evidence) {
  const out = new Map();
  for (const e of evidence || []) {
    if (e && e.quote) out.set(key(e), e.quote);
  }
  return out;
}

// One source: a button with a readable label that shows its quoted passage (or where it is from).
function sourceItem(c, quote) {
  const li = document.createElement("li");
  const btn = document.createElement("button");
  btn.type = "button";
  btn.className = "cite";
  btn.textContent = citationLabel(c);
  btn.dataset.docId = c.doc_id;
  btn.dataset.section = c.section || "";
  btn.setAttribute("aria-expanded", "false");
  const detail = document.createElement(quote ? "blockquote" : "p");
  detail.className = quote ? "quote" : "quote muted";
  detail.hidden = true;
  detail.textContent = quote
    || `From “${citationLabel(c)}”${c.version ? `, version ${c.version}` : ""}; this reply carries no quoted passage.`;
  detail.id = `q-${Math.random().toString(36).slice(2, 10)}`;
  btn.setAttribute("aria-controls", detail.id);
  btn.addEventListener("click", () => {
    detail.hidden = !detail.hidden;
    btn.setAttribute("aria-expanded", String(!detail.hidden));
  });
  li.append(btn, detail);
  return li;
}

export function sourceList(citations, evidence, heading) {
  const quotes = quotesOf(evidence);
  const wrap = document.createElement("div");
  wrap.className = "sources";
  const h = document.createElement("span");
  h.className = "muted";
  h.textContent = heading;
  const ul = document.createElement("ul");
  for (const c of citations) ul.appendChild(sourceItem(c, quotes.get(key(c))));
  wrap.append(h, ul);
  return wrap;
}

// ---- the history ---------------------------------------------------------------------------
let partial = null;    // the turn being spoken (partial transcripts), not final yet
const waiting = [];    // turns said and not yet answered, oldest first: replies come in order
let cleared = null;    // a turn whose reply the server cleared: the next one may replace it

function scrollDown() {
  const h = $("history");
  h.scrollTop = h.scrollHeight;
}

function newTurn() {
  const li = document.createElement("li");
  li.className = "turn";
  const you = document.createElement("p");
  you.className = "you";
  li.appendChild(you);
  $("history").appendChild(li);
  return li;
}

// The caller's words: typed turns at once, spoken ones from `transcript` events.
export function callerSaid(text, { final = true, typed = false } = {}) {
  const li = typed ? newTurn() : (partial || newTurn());
  const you = li.querySelector(".you");
  you.textContent = text;
  you.classList.toggle("partial", !final);
  li.dataset.source = typed ? "typed" : "spoken";
  if (!final) {
    partial = li;
  } else {
    if (!typed) partial = null;
    if (!typed && cleared && text.toLowerCase().startsWith(cleared.dataset.caller || "\u0000")) {
      // the caller went on speaking after a turn that ended early: that turn's reply was replaced
      cleared.classList.add("superseded");
      cleared.setAttribute("aria-label", "replaced by the next turn");
    }
    li.dataset.caller = text.toLowerCase();
    cleared = null;
    waiting.push(li);
  }
  scrollDown();
}

export function resetHistory() {
  $("history").replaceChildren();
  partial = null;
  cleared = null;
  waiting.length = 0;
}

export function dropPartial() {
  if (partial) partial.remove();
  partial = null;
}

// The agent's reply: its message, the action as a badge, its sources.
export function agentReplied(d) {
  const li = waiting.shift() || partial || newTurn();
  if (li === partial) partial = null;
  if (!li.dataset.caller) li.querySelector(".you").textContent = "(nothing was heard)";
  const div = document.createElement("div");
  div.className = "agent";
  const badge = document.createElement("span");
  badge.className = "badge";
  badge.dataset.action = d.action;
  badge.textContent = d.action;
  const msg = document.createElement("p");
  msg.className = "message";
  msg.textContent = d.message;
  div.append(badge, msg);
  const cites = d.citations || [];
  if (cites.length) div.appendChild(sourceList(cites, d.handoff && d.handoff.evidence, "Sources:"));
  li.appendChild(div);
  li.dataset.action = d.action;
  scrollDown();
}

export function replyCleared() {
  const items = $("history").querySelectorAll(".turn[data-action]");
  cleared = items.length ? items[items.length - 1] : null;
}

// ---- the handoff panel ---------------------------------------------------------------------
export function showHandoff(h) {
  $("transfer").hidden = false;
  $("transfer-team").textContent = humanize(h.team).toLowerCase();
  $("transfer-team").dataset.team = h.team;
  $("transfer-id").textContent = h.id;
  $("transfer-summary").textContent = h.summary;
  const box = $("transfer-sources");
  box.replaceChildren();
  const evidence = (h.evidence || []).filter((e) => e && e.quote);
  if (evidence.length) box.appendChild(sourceList(evidence, evidence, "Passed along to the team:"));
}

export function showError(ev) {
  const box = $("errors");
  box.hidden = false;
  const p = document.createElement("p");
  p.dataset.code = ev.code;
  p.textContent = ev.message;
  box.appendChild(p);
}

export function resetErrors() {
  $("errors").hidden = true;
  $("errors").replaceChildren();
}
