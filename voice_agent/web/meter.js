// The live microphone level: a WebAudio analyser on the mic stream, read once per animation
// frame, shown as a bar (role="meter"). `data-peak` keeps the loudest level seen this call, so a
// test can tell a meter that moves from one that only looks right.
const $ = (id) => document.getElementById(id);
const FLOOR_DB = -60;   // below this the bar is empty; 0 dBFS fills it

let analyser = null, samples = null, frame = 0;

function levelOf(x) {
  let sum = 0;
  for (let i = 0; i < x.length; i++) sum += x[i] * x[i];
  const db = 10 * Math.log10(sum / x.length + 1e-12);
  return Math.round(Math.max(0, Math.min(1, (db - FLOOR_DB) / -FLOOR_DB)) * 100);
}

function show(level) {
  const m = $("level");
  m.setAttribute("aria-valuenow", String(level));
  m.dataset.peak = String(Math.max(Number(m.dataset.peak || 0), level));
  $("level-bar").style.width = `${level}%`;
}

function tick() {
  if (!analyser) return;
  analyser.getFloatTimeDomainData(samples);
  show(levelOf(samples));
  frame = requestAnimationFrame(tick);
}

export function startMeter(ctx, source) {
  analyser = ctx.createAnalyser();
  analyser.fftSize = 1024;
  samples = new Float32Array(analyser.fftSize);
  source.connect(analyser);   // an analyser needs no output to be read
  $("level").dataset.peak = "0";
  tick();
}

export function stopMeter() {
  if (analyser) analyser.disconnect();
  analyser = null;
  cancelAnimationFrame(frame);
  show(0);
}
