// Browser client for the native protocol (docs/PROTOCOL.md, version 1). No build step, no CDN.
// Microphone -> AudioWorklet (ScriptProcessor where worklets are missing) -> 16 kHz PCM16 frames
// -> websocket; replies are played with Web Audio; the page shows transcript, decision,
// citations and transfer.
"use strict";

const RATE = 16000;
const $ = (id) => document.getElementById(id);
let ws = null, ctx = null, mic = null, node = null, playHead = 0, sources = [], replyRate = RATE;

function setStatus(state, text) {
  const s = $("status");
  s.dataset.state = state;
  s.textContent = text || state;
}

function logLine(cls, text) {
  const p = document.createElement("p");
  p.className = cls;
  p.textContent = text;
  $("log").appendChild(p);
  $("log").scrollTop = $("log").scrollHeight;
  return p;
}

let partialLine = null;
function showTranscript(ev) {
  if (!ev.final) {
    if (!partialLine) partialLine = logLine("you partial", ev.text);
    else partialLine.textContent = ev.text;
    return;
  }
  if (partialLine) { partialLine.remove(); partialLine = null; }
  if (ev.text) logLine("you", ev.text);
}

function showDecision(d) {
  const box = $("decision");
  box.hidden = false;
  box.dataset.action = d.action;
  $("decision-action").textContent = d.action;
  $("decision-meta").textContent = `evidence ${d.evidence_status}, risk ${d.risk_level}, confidence ${Number(d.confidence).toFixed(2)}`;
  $("decision-message").textContent = d.message;
  $("decision-reasons").textContent = (d.reasons || []).join(", ") || "—";
  const ul = $("citations");
  ul.replaceChildren();
  for (const c of d.citations || []) {
    const li = document.createElement("li");
    li.textContent = `${c.doc_id}#${c.section}` + (c.version ? ` (version ${c.version})` : "");
    li.dataset.docId = c.doc_id;
    ul.appendChild(li);
  }
  if (!ul.children.length) ul.appendChild(Object.assign(document.createElement("li"), { textContent: "none" }));
  logLine("agent", d.message);
}

function showTransfer(h) {
  $("transfer").hidden = false;
  $("transfer-team").textContent = h.team;
  $("transfer-id").textContent = h.id;
  $("transfer-summary").textContent = h.summary;
  // the agent stops after a hand-over: nothing more is typed or heard on this call
  setStatus("transferred", `transferred to the ${String(h.team).replace(/_/g, " ")} team`);
  $("text").disabled = true;
  $("send").disabled = true;
}

function showError(ev) {
  const box = $("errors");
  box.hidden = false;
  const p = document.createElement("p");
  p.dataset.code = ev.code;
  p.textContent = `${ev.code}: ${ev.message}`;
  box.appendChild(p);
}

// ---- playback -------------------------------------------------------------------------
function playPcm16(buf) {
  if (!ctx) return;
  const pcm = new Int16Array(buf);
  if (!pcm.length) return;
  const b = ctx.createBuffer(1, pcm.length, replyRate);
  const ch = b.getChannelData(0);
  for (let i = 0; i < pcm.length; i++) ch[i] = pcm[i] / 32768;
  const src = ctx.createBufferSource();
  src.buffer = b;
  src.connect(ctx.destination);
  playHead = Math.max(playHead, ctx.currentTime + 0.05);
  src.start(playHead);
  playHead += b.duration;
  sources.push(src);
  src.onended = () => { sources = sources.filter((s) => s !== src); };
}

function clearPlayback() {   // barge-in: drop what has not played yet
  for (const s of sources) { try { s.stop(); } catch (e) { /* already stopped */ } }
  sources = [];
  playHead = ctx ? ctx.currentTime : 0;
}

function whenPlayed(id) {
  const ms = ctx ? Math.max(0, (playHead - ctx.currentTime) * 1000) : 0;
  setTimeout(() => send({ type: "played", id }), ms);
}

// ---- protocol ---------------------------------------------------------------------------
function send(obj) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(obj));
}

function onMessage(msg) {
  if (msg.data instanceof ArrayBuffer) { playPcm16(msg.data); return; }
  let ev;
  try { ev = JSON.parse(msg.data); } catch (e) { return; }
  switch (ev.type) {
    case "ready": setStatus("live", `live (session ${ev.session}, role ${ev.role})`); break;
    case "transcript": showTranscript(ev); break;
    case "decision": showDecision(ev.decision); break;
    case "audio": replyRate = ev.sample_rate || RATE; break;
    case "audio_end": whenPlayed(ev.id); break;
    case "clear": clearPlayback(); break;
    case "transfer": showTransfer(ev.handoff); break;
    case "error": showError(ev); break;
  }
}

async function startMic() {
  mic = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true } });
  const source = ctx.createMediaStreamSource(mic);
  const sendFrame = (buf) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(buf); };
  if (ctx.audioWorklet) {
    await ctx.audioWorklet.addModule("/pcm-worklet.js");
    node = new AudioWorkletNode(ctx, "pcm-downsampler", { processorOptions: { outRate: RATE } });
    node.port.onmessage = (e) => sendFrame(e.data);
  } else {   // older browsers: ScriptProcessor, same box-filter downsampling
    node = ctx.createScriptProcessor(4096, 1, 1);
    const ratio = ctx.sampleRate / RATE;
    let pos = 0, acc = 0, count = 0, frame = [], level = 0;
    node.onaudioprocess = (e) => {
      const x = e.inputBuffer.getChannelData(0);
      for (let i = 0; i < x.length; i++) {
        acc += x[i]; count++; pos++;
        if (pos >= ratio) {
          pos -= ratio;
          const v = Math.max(-1, Math.min(1, acc / count)); acc = 0; count = 0;
          frame.push(v < 0 ? v * 32768 : v * 32767);
          if (frame.length === RATE / 50) { sendFrame(Int16Array.from(frame).buffer); frame = []; }
        }
      }
    };
  }
  // Nothing is audible from this path; connecting keeps the processor pulled by the graph.
  const mute = ctx.createGain();
  mute.gain.value = 0;
  source.connect(node);
  node.connect(mute).connect(ctx.destination);
}

async function startCall() {
  $("start").disabled = true;
  $("errors").hidden = true;
  $("errors").replaceChildren();
  setStatus("connecting", "connecting…");
  try {
    ctx = new (window.AudioContext || window.webkitAudioContext)();
    await ctx.resume();
    playHead = ctx.currentTime;
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(`${proto}//${location.host}/v1/call`);
    ws.binaryType = "arraybuffer";
    ws.onmessage = onMessage;
    ws.onclose = (e) => {
      setStatus("ended", `call ended (${e.code}${e.reason ? " " + e.reason : ""})`);
      stopMic();
      $("start").disabled = false;
      $("stop").disabled = $("text").disabled = $("send").disabled = true;
    };
    await new Promise((ok, fail) => { ws.onopen = ok; ws.onerror = () => fail(new Error("cannot connect")); });
    const caller = {};
    if ($("customer-type").value) caller.customer_type = $("customer-type").value;
    const start = { type: "start", protocol: 1, sample_rate: RATE, caller };
    if ($("token").value) start.token = $("token").value;
    send(start);
    $("stop").disabled = $("text").disabled = $("send").disabled = false;
    await startMic();
    setStatus("live", $("status").textContent.startsWith("live") ? $("status").textContent : "live");
  } catch (err) {
    showError({ code: "client", message: err && err.message ? err.message : String(err) });
    setStatus("failed", "failed");
    $("start").disabled = false;
  }
}

function stopMic() {
  if (mic) { mic.getTracks().forEach((t) => t.stop()); mic = null; }
  if (node) { node.disconnect(); node = null; }
}

function hangUp() {
  stopMic();
  send({ type: "stop" });
  $("stop").disabled = true;
}

$("start").addEventListener("click", startCall);
$("stop").addEventListener("click", hangUp);
$("text-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const t = $("text").value.trim();
  if (!t) return;
  send({ type: "text", text: t });
  $("text").value = "";
});
