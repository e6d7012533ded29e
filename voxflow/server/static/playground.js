// voxflow playground: speaks through this server's own API (docs/api.md, "Playground").
// Plain ES module, no build step, nothing fetched from elsewhere.
//
// Speak: POST /v1/audio/speech with response_format "pcm", stream_format "sse" and
// timestamps true; base64 PCM deltas are played as they arrive (AudioBufferSourceNodes back to
// back) and speech.word events highlight the words. A server or model without word timings
// answers 400 with param "timestamps": then the raw PCM stream (stream true) is played instead.
// window.voxflowStats holds the timings of the last Speak, for tests and the curious.

const $ = (id) => document.getElementById(id);
const KEY_STORE = "voxflow.apiKey";
const LEAD_S = 0.02;            // scheduling margin for a chunk that arrives after an underrun
const FFT_SIZE = 512;
const HOP = 256;
const BACKGROUND = "#111827";
const EMPTY_TEXT = "#9ca3af";   // the empty state's words, before the first Speak
const EMPTY = {
  waveform: "The waveform of the speech appears here when you press Speak",
  spectrogram: "Its spectrogram appears here",
};

const stats = { done: true };
window.voxflowStats = stats;

let voices = [];       // /v1/audio/voices entries (aliases left out)
let audioContext = null;
let current = null;    // the Playback in progress
const untimed = new Set();  // models that answered that they have no word timings

class ApiError extends Error {
  constructor(status, body) {
    const error = body && body.error ? body.error : {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.param = error.param;
    this.code = error.code;
  }
}

function authHeaders(extra = {}) {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function apiError(response) {
  let body = null;
  try { body = await response.json(); } catch { /* not JSON: the status says it */ }
  return new ApiError(response.status, body);
}

async function getJSON(path) {
  const response = await fetch(path, { headers: authHeaders() });
  if (!response.ok) throw await apiError(response);
  return response.json();
}

function post(body, signal) {
  return fetch("/v1/audio/speech", {
    method: "POST", signal, body: JSON.stringify(body),
    headers: authHeaders({ "Content-Type": "application/json" }),
  });
}

function showError(error) {
  $("error").textContent = error.message;
  stats.error = error.message;
  if (error.status === 401) openKeyDialog(error.message);
}

function setStatus(text) { $("status").textContent = text; }

// ---- API key -------------------------------------------------------------------------------

function openKeyDialog(message) {
  $("key-button").hidden = false;
  $("key-error").textContent = message || "";
  $("key").value = sessionStorage.getItem(KEY_STORE) || "";
  if (!$("key-dialog").open) $("key-dialog").showModal();
}

function saveKey() {
  sessionStorage.setItem(KEY_STORE, $("key").value.trim());
  $("error").textContent = "";
  loadLists();
}

// ---- models, voices, languages --------------------------------------------------------------

function fillSelect(select, values, chosen) {
  select.replaceChildren(...values.map(([value, label]) => new Option(label, value)));
  if (values.some(([value]) => value === chosen)) select.value = chosen;
}

async function loadLists() {
  try {
    const [models, voiceList] = await Promise.all([getJSON("/v1/models"),
                                                   getJSON("/v1/audio/voices")]);
    voices = voiceList.data.filter((v) => !v.alias_of);
    const served = models.data.filter((m) => !m.alias_of).map((m) => [m.id, m.id]);
    fillSelect($("model"), served, $("model").value);
    fillVoices();
    stats.listsLoaded = true;
  } catch (error) {
    showError(error);
  }
}

function fillVoices() {
  const mine = voices.filter((v) => v.model === $("model").value);
  const fallback = (mine.find((v) => v.default) || mine[0] || {}).id;
  // Every language the voice speaks, its own first: Kokoro's Japanese voices read English too.
  fillSelect($("voice"), mine.map((v) => [v.id, `${v.id} (${v.languages.join(", ")})`]),
             fallback);
  fillLanguages();
}

function fillLanguages() {
  const voice = voices.find((v) => v.model === $("model").value && v.id === $("voice").value);
  const tags = voice ? voice.languages : [];
  fillSelect($("language"), [["", "auto"], ...tags.map((t) => [t, t])], $("language").value);
}

function requestBody(format) {
  const body = { model: $("model").value, voice: $("voice").value, input: $("text").value,
                 response_format: format };
  // The API checks every value and words the errors: the page sends what the fields hold.
  if ($("speed").value !== "") body.speed = Number($("speed").value);
  if ($("seed").value !== "") body.seed = Number($("seed").value);
  if ($("language").value) body.language = $("language").value;
  return body;
}

// ---- audio: decoding, scheduling, analysis -----------------------------------------------------

const hann = Float32Array.from({ length: FFT_SIZE },
                               (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / FFT_SIZE));

// Magnitudes (0-255 over -90..-10 dBFS) of one Hann-windowed frame: radix-2 FFT in place.
function spectrumColumn(frame) {
  const n = FFT_SIZE;
  const re = Float64Array.from(frame, (x, i) => x * hann[i]);
  const im = new Float64Array(n);
  for (let i = 1, j = 0; i < n; i++) {
    let bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) { [re[i], re[j]] = [re[j], re[i]]; }
  }
  for (let len = 2; len <= n; len <<= 1) {
    const angle = (-2 * Math.PI) / len;
    for (let start = 0; start < n; start += len) {
      for (let k = 0; k < len / 2; k++) {
        const wr = Math.cos(angle * k), wi = Math.sin(angle * k);
        const a = start + k, b = a + len / 2;
        const tr = re[b] * wr - im[b] * wi, ti = re[b] * wi + im[b] * wr;
        re[b] = re[a] - tr; im[b] = im[a] - ti;
        re[a] += tr; im[a] += ti;
      }
    }
  }
  const column = new Uint8Array(n / 2);
  for (let k = 0; k < n / 2; k++) {
    const db = 20 * Math.log10(Math.hypot(re[k], im[k]) / (n / 4) + 1e-9);
    column[k] = Math.max(0, Math.min(255, ((db + 90) / 80) * 255));
  }
  return column;
}

class Playback {
  constructor(context, text) {
    this.context = context;
    this.text = text;
    this.rate = 0;
    this.samples = 0;         // received
    this.carry = null;        // an odd byte left from the previous chunk
    this.segments = [];       // {at: context time, audio: audio time, duration}
    this.sources = [];
    this.nextTime = 0;
    this.peaks = [];          // [min, max] per block of 1/200 s
    this.block = [];
    this.columns = [];        // spectrogram columns
    this.pending = new Float32Array(0);
    this.words = [];
    this.spans = [];
    this.currentWord = -1;
    this.responseEnded = false;
    this.abort = new AbortController();
  }

  pushBytes(bytes) {
    if (this.carry !== null) {
      const joined = new Uint8Array(bytes.length + 1);
      joined[0] = this.carry;
      joined.set(bytes, 1);
      bytes = joined;
      this.carry = null;
    }
    const count = bytes.length >> 1;
    if (bytes.length & 1) this.carry = bytes[bytes.length - 1];
    if (!count) return;
    if (stats.firstAudioAt === undefined) {
      stats.firstAudioAt = performance.now();
      stats.ttfaMs = stats.firstAudioAt - stats.requestAt;
      $("ttfa").textContent = `${Math.round(stats.ttfaMs)} ms`;
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset, count * 2);
    const samples = new Float32Array(count);
    for (let i = 0; i < count; i++) samples[i] = view.getInt16(2 * i, true) / 32768;
    this.schedule(samples);
    this.analyse(samples);
    drawSpectrogram(this);
  }

  schedule(samples) {
    const buffer = this.context.createBuffer(1, samples.length, this.rate);
    buffer.copyToChannel(samples, 0);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    const at = Math.max(this.nextTime, this.context.currentTime + LEAD_S);
    source.start(at);
    const duration = samples.length / this.rate;
    this.segments.push({ at, audio: this.samples / this.rate, duration });
    this.sources.push(source);
    this.nextTime = at + duration;
    this.samples += samples.length;
  }

  analyse(samples) {
    const blockSize = Math.max(1, Math.round(this.rate / 200));
    for (const x of samples) {
      this.block.push(x);
      if (this.block.length === blockSize) {
        this.peaks.push([Math.min(...this.block), Math.max(...this.block)]);
        this.block = [];
      }
    }
    const all = new Float32Array(this.pending.length + samples.length);
    all.set(this.pending);
    all.set(samples, this.pending.length);
    let start = 0;
    for (; start + FFT_SIZE <= all.length; start += HOP) {
      this.columns.push(spectrumColumn(all.subarray(start, start + FFT_SIZE)));
    }
    this.pending = all.slice(start);
  }

  // Seconds of audio played by now (underruns leave gaps between segments).
  position() {
    const now = this.context.currentTime;
    let position = 0;
    for (const s of this.segments) {
      if (s.at > now) break;
      position = s.audio + Math.min(now - s.at, s.duration);
    }
    return position;
  }

  seconds() { return this.rate ? this.samples / this.rate : 0; }

  addWord(word) {
    this.words.push(word);
    renderTranscript(this);
  }

  stop() {
    this.abort.abort();
    for (const source of this.sources) {
      try { source.stop(); } catch { /* not started */ }
    }
  }
}

// ---- drawing -----------------------------------------------------------------------------------

// A canvas before the first Speak: its background and a line saying what will appear there.
function drawEmpty(id) {
  const canvas = $(id);
  const g = canvas.getContext("2d");
  g.fillStyle = BACKGROUND;
  g.fillRect(0, 0, canvas.width, canvas.height);
  g.fillStyle = EMPTY_TEXT;
  g.font = "16px system-ui, sans-serif";
  g.textAlign = "center";
  g.textBaseline = "middle";
  g.fillText(EMPTY[id], canvas.width / 2, canvas.height / 2);
}

// The seconds both canvases span: at least 4, growing by 4 as the audio does.
function span(play) { return Math.max(4, Math.ceil(play.seconds() / 4) * 4); }

function drawWaveform(play) {
  const canvas = $("waveform");
  const g = canvas.getContext("2d");
  const { width, height } = canvas;
  g.fillStyle = BACKGROUND;
  g.fillRect(0, 0, width, height);
  const perPixel = (span(play) * 200) / width;   // peak blocks per pixel column
  g.fillStyle = "#38bdf8";
  for (let x = 0; x < width; x++) {
    const first = Math.floor(x * perPixel), last = Math.floor((x + 1) * perPixel);
    if (first >= play.peaks.length) break;
    let low = 0, high = 0;
    for (let i = first; i <= Math.min(last, play.peaks.length - 1); i++) {
      low = Math.min(low, play.peaks[i][0]);
      high = Math.max(high, play.peaks[i][1]);
    }
    const top = ((1 - high) / 2) * height, bottom = ((1 - low) / 2) * height;
    g.fillRect(x, top, 1, Math.max(1, bottom - top));
  }
  const playhead = (play.position() / span(play)) * width;
  g.fillStyle = "#f97316";
  g.fillRect(Math.round(playhead), 0, 2, height);
}

function drawSpectrogram(play) {
  const canvas = $("spectrogram");
  const g = canvas.getContext("2d");
  const { width, height } = canvas;
  const image = g.createImageData(width, height);
  const columnsPerSecond = play.rate / HOP;
  const bins = FFT_SIZE / 2;
  for (let x = 0; x < width; x++) {
    const column = play.columns[Math.floor(((x + 0.5) / width) * span(play) * columnsPerSecond)];
    for (let y = 0; y < height; y++) {
      const v = column ? column[Math.floor(((height - 1 - y) / height) * bins)] : 0;
      const i = (y * width + x) * 4;
      image.data[i] = 17 + (v * 238) / 255;          // dark blue-grey to yellow-white
      image.data[i + 1] = 24 + (v * v * 231) / 65025;
      image.data[i + 2] = 39 + (v > 128 ? (255 - v) : v) * 0.6;
      image.data[i + 3] = 255;
    }
  }
  g.putImageData(image, 0, 0);
}

// The input text with a span per timed word (offsets are code points into the input).
function renderTranscript(play) {
  const codePoints = Array.from(play.text);
  const parts = [];
  const spans = [];
  let at = 0;
  const words = [...play.words].sort((a, b) => a.text_start - b.text_start);
  for (const word of words) {
    if (word.text_start < at) continue;
    parts.push(document.createTextNode(codePoints.slice(at, word.text_start).join("")));
    const span = document.createElement("span");
    span.className = "word";
    span.textContent = codePoints.slice(word.text_start, word.text_end).join("");
    span.dataset.start = word.start;
    span.dataset.end = word.end;
    spans.push(span);
    parts.push(span);
    at = word.text_end;
  }
  parts.push(document.createTextNode(codePoints.slice(at).join("")));
  $("transcript").replaceChildren(...parts);
  play.spans = spans;
  play.currentWord = -1;
}

function highlight(play) {
  const position = play.position();
  const index = play.spans.findIndex(
    (s) => Number(s.dataset.start) <= position && position < Number(s.dataset.end));
  if (index === play.currentWord) return;
  if (play.currentWord >= 0) play.spans[play.currentWord].classList.remove("current");
  play.currentWord = index;
  if (index >= 0) {
    play.spans[index].classList.add("current");
    stats.highlighted.push(`${index}:${play.spans[index].textContent}`);
  }
}

function tick(play) {
  if (play !== current) return;
  const now = play.context.currentTime;
  if (stats.playStartedAt === undefined && play.segments.length && now >= play.segments[0].at) {
    stats.playStartedAt = performance.now();
  }
  drawWaveform(play);
  highlight(play);
  if (play.responseEnded && now >= play.nextTime) {
    finish(play);
    return;
  }
  requestAnimationFrame(() => tick(play));
}

function finish(play) {
  if (play.currentWord >= 0) play.spans[play.currentWord].classList.remove("current");
  stats.playEndedAt = performance.now();
  stats.done = true;
  $("stop").disabled = true;
  if (current === play) current = null;
}

// ---- reading the response ------------------------------------------------------------------

function base64Bytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

async function readPCM(response, play) {
  const reader = response.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    play.pushBytes(value);
  }
}

function handleEvent(block, play) {
  const data = block.split("\n").filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(5).trimStart()).join("\n");
  if (!data) return;
  const event = JSON.parse(data);
  if (event.type === "speech.audio.delta") play.pushBytes(base64Bytes(event.audio));
  else if (event.type === "speech.word") play.addWord(event);
  else if (event.type === "error") throw new ApiError(500, event);
}

async function readSSE(response, play) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer = (buffer + value).replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      handleEvent(buffer.slice(0, end), play);
      buffer = buffer.slice(end + 2);
    }
  }
}

// ---- Speak, Stop, Download -----------------------------------------------------------------

function resetStats(model) {
  for (const key of Object.keys(stats)) delete stats[key];
  Object.assign(stats, { model, done: false, highlighted: [], requestAt: performance.now() });
  for (const id of ["ttfa", "rtf", "seconds"]) $(id).textContent = "–";
}

async function speak(event) {
  event.preventDefault();
  if (current) stopPlayback();
  $("error").textContent = "";
  setStatus("");
  // Created (or resumed) inside the click or key press: browsers let a gesture start audio.
  audioContext = audioContext || new AudioContext();
  audioContext.resume();
  const base = requestBody("pcm");
  const play = new Playback(audioContext, base.input);
  current = play;
  resetStats(base.model);
  $("transcript").textContent = base.input;
  $("stop").disabled = false;
  const { signal } = play.abort;
  try {
    let sse = !untimed.has(base.model);
    let response = await post(sse ? { ...base, stream_format: "sse", timestamps: true }
                                   : { ...base, stream: true }, signal);
    if (!response.ok) {
      const error = await apiError(response);
      if (!sse || response.status !== 400 || error.param !== "timestamps") throw error;
      // No word timings here (the model or this server version): the plain PCM stream.
      untimed.add(base.model);
      sse = false;
      stats.requestAt = performance.now();
      response = await post({ ...base, stream: true }, signal);
      if (!response.ok) throw await apiError(response);
    }
    if (!sse) setStatus("no word timings for this model");
    stats.wordTimings = sse;
    play.rate = Number(response.headers.get("X-Sample-Rate"));
    requestAnimationFrame(() => tick(play));
    await (sse ? readSSE(response, play) : readPCM(response, play));
    stats.responseEndAt = performance.now();
    stats.audioSeconds = play.seconds();
    stats.rtf = (stats.responseEndAt - stats.requestAt) / 1000 / stats.audioSeconds;
    $("rtf").textContent = stats.rtf.toFixed(3);
    $("seconds").textContent = `${stats.audioSeconds.toFixed(2)} s`;
    if (sse && !play.words.length) setStatus("no word timings for this model");
    play.responseEnded = true;
  } catch (error) {
    if (error.name !== "AbortError") showError(error);
    play.stop();
    finish(play);
  }
}

function stopPlayback() {
  const play = current;
  if (!play) return;
  play.stop();
  finish(play);
}

async function download() {
  $("error").textContent = "";
  const format = $("format").value;
  const button = $("download");
  button.disabled = true;
  try {
    const response = await post({ ...requestBody(format), stream: false });
    if (!response.ok) throw await apiError(response);
    const url = URL.createObjectURL(await response.blob());
    const link = document.createElement("a");
    link.href = url;
    link.download = `speech.${format}`;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (error) {
    showError(error);
  } finally {
    button.disabled = false;
  }
}

// ---- start ---------------------------------------------------------------------------------

async function start() {
  $("speak-form").addEventListener("submit", speak);
  $("stop").addEventListener("click", stopPlayback);
  $("download").addEventListener("click", download);
  $("model").addEventListener("change", fillVoices);
  $("voice").addEventListener("change", fillLanguages);
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      $("speak-form").requestSubmit();
    }
  });
  $("key-button").addEventListener("click", () => openKeyDialog(""));
  $("key-form").addEventListener("submit", saveKey);
  $("key-cancel").addEventListener("click", () => $("key-dialog").close());
  for (const id of Object.keys(EMPTY)) drawEmpty(id);
  try {
    const health = await (await fetch("/health")).json();
    if (health.api_key_required) {
      $("key-button").hidden = false;
      if (!sessionStorage.getItem(KEY_STORE)) {
        openKeyDialog("");
        return;
      }
    }
  } catch { /* the lists below say what is wrong */ }
  await loadLists();
}

start();
