// Browser client for the native protocol (docs/PROTOCOL.md, version 1). No build step, no CDN.
// Microphone -> AudioWorklet (ScriptProcessor where worklets are missing) -> 16 kHz PCM16 frames
// -> websocket; replies are played with Web Audio. What the page shows is drawn by console.js;
// this file keeps the call: the socket, the audio both ways, and which state the call is in.
import {
  agentReplied, callerSaid, currentState, dropPartial, replyCleared, resetErrors, resetHistory, setState,
  showError, showHandoff,
} from "/console.js";
import { startMeter, stopMeter } from "/meter.js";

const RATE = 16000;
const $ = (id) => document.getElementById(id);
let ws = null, ctx = null, mic = null, node = null, playHead = 0, sources = [], replyRate = RATE;
// What the indicator is derived from: a turn waiting for its decision, reply audio playing, a hand-over.
let inFlight = 0, transferred = false;
// Every decision is spoken; until its first audio frame (a few hundred ms of TTS) the agent is still
// "thinking", not "listening": without this the indicator would flash "listening" on every reply.
let replyDue = null;
const REPLY_WAIT_MS = 3000;   // a reply whose audio never comes (TTS failure) stops holding "thinking"

function awaitReply(on) {
  clearTimeout(replyDue);
  replyDue = on ? setTimeout(() => { replyDue = null; settle(); }, REPLY_WAIT_MS) : null;
}

// transferred > thinking > speaking > listening: the newest thing the caller did wins, so a turn
// typed while the last reply still plays shows "thinking" until its decision arrives.
function settle() {
  if (transferred) setState("transferred");
  else if (inFlight > 0 || (replyDue !== null && !sources.length)) setState("thinking");
  else if (sources.length) setState("speaking");
  else if (mic) setState("listening");
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
  src.onended = () => { sources = sources.filter((s) => s !== src); settle(); };
  awaitReply(false);
  settle();
}

function clearPlayback() {   // barge-in: drop what has not played yet
  for (const s of sources) { try { s.stop(); } catch (e) { /* already stopped */ } }
  sources = [];
  playHead = ctx ? ctx.currentTime : 0;
  settle();
}

function whenPlayed(id) {
  const ms = ctx ? Math.max(0, (playHead - ctx.currentTime) * 1000) : 0;
  setTimeout(() => send({ type: "played", id }), ms);
}

// ---- protocol ---------------------------------------------------------------------------
function send(obj) {
  if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(obj));
}

function onTranscript(ev) {
  if (!ev.final) { callerSaid(ev.text, { final: false }); return; }
  if (!ev.text) { dropPartial(); return; }
  callerSaid(ev.text);
  inFlight += 1;
  settle();
}

function onDecision(d) {
  agentReplied(d);
  inFlight = Math.max(0, inFlight - 1);
  awaitReply(true);
  settle();
}

function onTransfer(h) {
  showHandoff(h);
  awaitReply(false);
  transferred = true;   // the agent stops after a hand-over: nothing more is typed or heard
  settle();
  $("text").disabled = $("send").disabled = true;
}

function onMessage(msg) {
  if (msg.data instanceof ArrayBuffer) { playPcm16(msg.data); return; }
  let ev;
  try { ev = JSON.parse(msg.data); } catch (e) { return; }
  switch (ev.type) {
    case "ready": $("session-info").textContent = `session ${ev.session} · role ${ev.role}`; break;
    case "transcript": onTranscript(ev); break;
    case "decision": onDecision(ev.decision); break;
    case "audio": replyRate = ev.sample_rate || RATE; break;
    case "audio_end": whenPlayed(ev.id); break;
    case "clear": replyCleared(); clearPlayback(); break;
    case "transfer": onTransfer(ev.handoff); break;
    case "error": showError(ev); awaitReply(false); settle(); break;
  }
}

// ---- microphone ---------------------------------------------------------------------------
function scriptProcessor(sendFrame) {   // older browsers: same box-filter downsampling as the worklet
  const proc = ctx.createScriptProcessor(4096, 1, 1);
  const ratio = ctx.sampleRate / RATE;
  let pos = 0, acc = 0, count = 0, frame = [];
  proc.onaudioprocess = (e) => {
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
  return proc;
}

async function startMic() {
  mic = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true } });
  const source = ctx.createMediaStreamSource(mic);
  const sendFrame = (buf) => { if (ws && ws.readyState === WebSocket.OPEN) ws.send(buf); };
  if (ctx.audioWorklet) {
    await ctx.audioWorklet.addModule("/pcm-worklet.js");
    node = new AudioWorkletNode(ctx, "pcm-downsampler", { processorOptions: { outRate: RATE } });
    node.port.onmessage = (e) => sendFrame(e.data);
  } else {
    node = scriptProcessor(sendFrame);
  }
  // Nothing is audible from this path; connecting keeps the processor pulled by the graph.
  const mute = ctx.createGain();
  mute.gain.value = 0;
  source.connect(node);
  node.connect(mute).connect(ctx.destination);
  startMeter(ctx, source);
}

function stopMic() {
  if (mic) { mic.getTracks().forEach((t) => t.stop()); mic = null; }
  if (node) { node.disconnect(); node = null; }
  stopMeter();
}

// ---- the call -----------------------------------------------------------------------------
async function openSocket() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  ws = new WebSocket(`${proto}//${location.host}/v1/call`);
  ws.binaryType = "arraybuffer";
  ws.onmessage = onMessage;
  ws.onclose = (e) => {
    stopMic();
    const how = `call ended (${e.code}${e.reason ? " " + e.reason : ""})`;
    if (transferred) setState("transferred", `Transferred to a person — ${how}`);
    else setState("ended", how[0].toUpperCase() + how.slice(1));
    $("start").disabled = false;
    $("stop").disabled = $("text").disabled = $("send").disabled = true;
  };
  await new Promise((ok, fail) => { ws.onopen = ok; ws.onerror = () => fail(new Error("cannot connect")); });
}

async function startCall() {
  $("start").disabled = true;
  resetErrors();
  resetHistory();
  inFlight = 0;
  transferred = false;
  awaitReply(false);
  $("transfer").hidden = true;
  setState("connecting");
  try {
    ctx = new (window.AudioContext || window.webkitAudioContext)();
    await ctx.resume();
    playHead = ctx.currentTime;
    await openSocket();
    const caller = {};
    if ($("customer-type").value) caller.customer_type = $("customer-type").value;
    const start = { type: "start", protocol: 1, sample_rate: RATE, caller };
    if ($("token").value) start.token = $("token").value;
    send(start);
    $("stop").disabled = $("text").disabled = $("send").disabled = false;
    await startMic();
    settle();
  } catch (err) {
    showError({ code: "client", message: err && err.message ? err.message : String(err) });
    setState("failed");
    $("start").disabled = false;
  }
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
  if (!t || currentState() === "transferred") return;
  callerSaid(t, { typed: true });   // echoed at once; the decision follows
  inFlight += 1;
  settle();
  send({ type: "text", text: t });
  $("text").value = "";
});
