// The chat page's logic: server status, attachments (a PDF's own chip: documents.js), the streamed OpenAI chat
// request, the conversation's turns (kept by conversations.js: switch, regenerate, edit and resend, copy), and
// a small Markdown renderer that escapes all HTML before it adds any formatting of its own.
'use strict';

// ---------------------------------------------------------------------------------------------------
// Page state and elements.

const $ = (id) => document.getElementById(id);
const el = {
  status: $('status'), banner: $('banner'), messages: $('messages'), empty: $('empty'), composer: $('composer'),
  prompt: $('prompt'), send: $('send'), stop: $('stop'), fileInput: $('file-input'), attachments: $('attachments'),
  newChat: $('new-chat'), settings: $('settings'), settingsToggle: $('settings-toggle'), temperature: $('temperature'),
  temperatureValue: $('temperature-value'), maxTokens: $('max-tokens'), resolution: $('resolution'), apiKey: $('api-key'),
  dropOverlay: $('drop-overlay'), chats: $('chats'), chatsToggle: $('chats-toggle'), chatList: $('chat-list'),
  system: $('system'), topP: $('top-p'), topK: $('top-k'), seed: $('seed'),
};

const state = {
  server: 'connecting',   // connecting | loading | ready | failed | offline | shutting_down
  serverMessage: '',
  model: '',
  chat: 0,                // which conversation: New chat counts up, so a late answer cannot join the next one
  conversation: Conversations.create(),  // the one shown: {id, title, turns: [{user, assistant}]}
  bubbles: [],            // [{user, assistant}] on screen, one per turn (the answer being written is not yet one)
  attachments: [],        // {file, kind, thumb (object URL), name, width, height}; a document: documents.js
  controller: null,       // AbortController of the request in flight
  notice: '', noticeTimer: 0,
  objectUrls: [],         // thumbnails shown in the conversation, released on New chat
  lastImage: null,        // the data URL of the latest image sent: the one boxes in answers refer to (not a page)
};
// The conversation so far as OpenAI messages (what the next request carries before its own message).
Object.defineProperty(state, 'history', { get: () => historyOf(state.conversation) });

function userMessageOf(user) {
  if (!user.parts.length) return { role: 'user', content: user.text };
  const content = user.parts.map((p) => p.kind === 'video' ? { type: 'video_url', video_url: { url: p.url } }
    : p.kind === 'document' ? Documents.contentPart(p) : { type: 'image_url', image_url: { url: p.url } });
  if (user.text) content.push({ type: 'text', text: user.text });
  return { role: 'user', content };
}

function historyOf(conversation) {
  const out = [];
  for (const t of conversation.turns) {
    out.push(userMessageOf(t.user));
    const said = { role: 'assistant', content: t.assistant.text };
    if (t.assistant.reasoning) said.reasoning_content = t.assistant.reasoning;
    out.push(said);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Settings, kept in localStorage (the API key only for this tab, in sessionStorage).

const SETTINGS_KEY = 'qvl.settings';

function loadSettings() {
  try {
    const s = JSON.parse(localStorage.getItem(SETTINGS_KEY) || '{}');
    if (typeof s.temperature === 'number') el.temperature.value = s.temperature;
    if (typeof s.maxTokens === 'number') el.maxTokens.value = s.maxTokens;
    if (typeof s.resolution === 'string' && [...el.resolution.options].some((o) => o.value === s.resolution)) {
      el.resolution.value = s.resolution;
    }
    if (typeof s.system === 'string') el.system.value = s.system;
    for (const [key, input] of [['topP', el.topP], ['topK', el.topK], ['seed', el.seed]]) {
      if (typeof s[key] === 'string') input.value = s[key];
    }
    el.apiKey.value = sessionStorage.getItem('qvl.apiKey') || '';
  } catch (e) { /* storage unavailable: defaults */ }
  el.temperatureValue.textContent = Number(el.temperature.value).toFixed(2);
}

function saveSettings() {
  el.temperatureValue.textContent = Number(el.temperature.value).toFixed(2);
  try {
    localStorage.setItem(SETTINGS_KEY, JSON.stringify({
      temperature: Number(el.temperature.value), maxTokens: Number(el.maxTokens.value), resolution: el.resolution.value,
      system: el.system.value, topP: el.topP.value, topK: el.topK.value, seed: el.seed.value,
    }));
    sessionStorage.setItem('qvl.apiKey', el.apiKey.value);
  } catch (e) { /* storage unavailable */ }
}

function maxTokens() {
  const n = Math.floor(Number(el.maxTokens.value));
  return Number.isFinite(n) && n >= 1 ? n : 512;
}

function maxPixels() { return Number(el.resolution.value) || 0; }

// The optional sampling settings that are set (empty: the server's defaults).
function samplingFields() {
  const out = {};
  const num = (input) => (input.value.trim() === '' ? null : Number(input.value));
  const topP = num(el.topP), topK = num(el.topK), seed = num(el.seed);
  if (topP !== null && topP > 0 && topP <= 1) out.top_p = topP;
  if (topK !== null && Number.isInteger(topK) && topK >= 0) out.top_k = topK;
  if (seed !== null && Number.isInteger(seed)) out.seed = seed;
  return out;
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (el.apiKey.value.trim()) h.Authorization = 'Bearer ' + el.apiKey.value.trim();
  return h;
}

// ---------------------------------------------------------------------------------------------------
// Server status: /health until the model is ready, then now and then to show busy slots and the queue.

let healthTimer = 0;
function scheduleHealth(delay) {
  clearTimeout(healthTimer);
  healthTimer = setTimeout(pollHealth, delay);
}

async function pollHealth() {
  let delay = 1000;
  try {
    const res = await fetch('/health', { cache: 'no-store' });
    const j = await res.json().catch(() => ({}));
    if (res.status === 200) {
      state.model = j.model || '';
      const info = j.model_info;  // what is loaded: size, and whether it is a Thinking model
      if (info && info.size) state.model += ' (' + info.size + (info.chat_template === 'thinking' ? ', thinking' : '') + ')';
      const busy = j.slots ? j.slots.busy : 0, total = j.slots ? j.slots.total : 1;
      setServer('ready', busy >= total && total > 0 ? (j.queue > 0 ? 'busy, ' + j.queue + ' waiting' : 'busy') : 'ready');
      delay = 5000;
    } else if (j.status === 'loading') {
      setServer('loading', 'The model is loading. You can type; Send works as soon as it is ready.');
    } else if (j.status === 'shutting_down') {
      setServer('shutting_down', 'The server is shutting down.');
      delay = 3000;
    } else if (j.status === 'error') {
      setServer('failed', 'The model failed to load: ' + (j.error || 'unknown error') + '. Restart qvl serve.');
      delay = 10000;
    } else {
      setServer('offline', 'The server answered /health with HTTP ' + res.status + '; retrying.');
      delay = 3000;
    }
  } catch (e) {
    setServer('offline', 'Cannot reach the server; is qvl serve running? Retrying.');
    delay = 3000;
  }
  scheduleHealth(delay);
}

function setServer(server, message) {
  state.server = server;
  state.serverMessage = server === 'ready' ? '' : message;
  el.status.className = 'status ' + server + (server === 'ready' && message.startsWith('busy') ? ' busy' : '');
  el.status.textContent = server === 'ready' ? message + (state.model ? ' · ' + state.model : '') :
    { loading: 'loading model…', failed: 'failed', offline: 'offline', shutting_down: 'shutting down' }[server] || server;
  document.body.dataset.server = server;
  renderBanner();
  updateButtons();
}

function notice(message) {
  state.notice = message;
  clearTimeout(state.noticeTimer);
  state.noticeTimer = setTimeout(() => { state.notice = ''; renderBanner(); }, 8000);
  renderBanner();
}

function renderBanner() {
  const text = state.notice || state.serverMessage;
  el.banner.textContent = text;
  el.banner.hidden = !text;
  el.banner.className = 'banner ' + (state.notice ? 'notice' : state.server);
}

function updateButtons() {
  const generating = state.controller !== null;
  el.send.hidden = generating;
  el.stop.hidden = !generating;
  el.send.disabled = state.server !== 'ready';
  el.send.title = state.server === 'ready' ? 'Send' : 'Waiting for the server: ' + el.status.textContent;
}

// ---------------------------------------------------------------------------------------------------
// Attachments: the file button, drag and drop, and paste all end here.

const IMAGE_NAME_RE = /\.(jpe?g|png|webp|gif|bmp)$/i;
const VIDEO_NAME_RE = /\.(mp4|m4v|mov|webm|mkv|avi|ts)$/i;

function isVideo(file) {
  return (file.type || '').startsWith('video/') || VIDEO_NAME_RE.test(file.name || '');
}

// What the first bytes say a file is: an image format the browser shows, one only the server reads (TIFF,
// PBM/PGM/PPM), a video container, a PDF document, or nothing qvl takes.
function sniff(b) {
  const at = (i, ...xs) => xs.every((x, k) => b[i + k] === x);
  const text = (i, t) => [...t].every((c, k) => b[i + k] === c.charCodeAt(0));
  if (at(0, 0xff, 0xd8, 0xff) || at(0, 0x89, 0x50, 0x4e, 0x47) || text(0, 'GIF8') || (text(0, 'RIFF') && text(8, 'WEBP')) ||
      text(0, 'BM') || at(0, 0, 0, 1, 0)) return 'image';
  if (text(0, 'II*\u0000') || text(0, 'MM\u0000*') || (b[0] === 0x50 && b[1] >= 0x31 && b[1] <= 0x36)) return 'server-image';
  if (text(4, 'ftyp') || at(0, 0x1a, 0x45, 0xdf, 0xa3) || (text(0, 'RIFF') && text(8, 'AVI ')) || text(0, 'OggS') ||
      (b[0] === 0x47 && b.length > 188 && b[188] === 0x47)) return 'video';
  return Documents.isPdf(b) ? 'document' : null;
}

const MAX_IMAGE_FILE = 64 << 20;  // read and scaled down here before it is sent
const MAX_VIDEO_FILE = 14 << 20;  // sent as it is, base64 in JSON, within the server's default --max-body (20 MB)

// Checks a file before it is shown: what its bytes are, its size, and for a picture that the browser can
// decode it; a refusal is a notice and nothing attached.
async function checkFile(file) {
  const name = file.name || 'That file';
  let head;
  try { head = new Uint8Array(await file.slice(0, 1024).arrayBuffer()); } catch (e) { return { error: name + ' cannot be read.' }; }
  const kind = sniff(head);
  if (!kind) {
    return { error: name + ' is not an image or a video, nor a PDF (its bytes say so); attach JPEG, PNG, WebP, GIF or ' +
                    'BMP pictures, MP4, WebM, MKV or MOV clips, or PDF documents.' };
  }
  const mb = (n) => (n / 1048576).toFixed(n < 10485760 ? 1 : 0) + ' MB';
  const [limit, what, can] = { video: [MAX_VIDEO_FILE, 'clips', 'can be sent (cut it shorter or smaller)'],
                               document: [Documents.MAX_FILE, 'PDF documents', 'can be attached'] }[kind] ||
                             [MAX_IMAGE_FILE, 'pictures', 'can be attached'];
  if (file.size > limit) return { error: name + ' is ' + mb(file.size) + '; ' + what + ' up to ' + mb(limit) + ' ' + can + '.' };
  return { kind };
}

async function addFiles(files) {
  for (const file of files) {
    const check = await checkFile(file);
    if (check.error) {
      notice(check.error);
      continue;
    }
    if (check.kind === 'document') { addDocument(file); continue; }  // the server reads its pages
    const video = check.kind === 'video';
    const att = { file, kind: video ? 'video' : 'image', name: file.name || (video ? 'video' : 'pasted image'),
                  thumb: URL.createObjectURL(file), poster: null, width: 0, height: 0, duration: 0 };
    if (video) {
      // The server decodes the clip itself; one the browser cannot play still goes up, without a poster.
      state.attachments.push(att);
      posterFrame(att.thumb).then((p) => Object.assign(att, p)).catch(() => { att.undecodable = true; })
        .then(renderAttachments);
      continue;
    }
    try {
      const img = await loadImage(att.thumb);
      att.width = img.naturalWidth;
      att.height = img.naturalHeight;
    } catch (e) {
      if (check.kind === 'image') {  // a format the browser reads, yet it cannot: damaged
        URL.revokeObjectURL(att.thumb);
        notice(att.name + ' cannot be read as a picture (damaged or cut short?); it was not attached.');
        continue;
      }
      att.undecodable = true;  // TIFF, PPM: the server reads them, the browser does not
    }
    state.attachments.push(att);
  }
  renderAttachments();
}

// A PDF shows at once as a chip reading its pages; the server's preview (page count, page pictures) fills it
// in, or its refusal (encrypted, damaged, no renderer) is a notice and the chip goes.
function addDocument(file) {
  const att = Documents.attachment(file);
  state.attachments.push(att);
  Documents.load(att, headers()).catch((e) => {
    if (!state.attachments.includes(att)) return;  // removed while it was read
    state.attachments = state.attachments.filter((a) => a !== att);
    notice(att.name + ' was not attached: ' + e.message);
  }).then(renderAttachments);
}

// A video's first picture (0.1 s in), its size and length, read by the browser's own decoder. The server
// decodes the file itself; a clip the browser cannot play still goes up, shown without a poster.
function posterFrame(url) {
  return new Promise((resolve, reject) => {
    const v = document.createElement('video');
    v.muted = true;
    v.preload = 'auto';
    v.addEventListener('loadeddata', () => { v.currentTime = Math.min(0.1, (v.duration || 0) / 2); }, { once: true });
    v.addEventListener('seeked', () => {
      const c = document.createElement('canvas');
      c.width = v.videoWidth;
      c.height = v.videoHeight;
      c.getContext('2d').drawImage(v, 0, 0);
      resolve({ poster: c.toDataURL('image/jpeg', 0.85), width: v.videoWidth, height: v.videoHeight,
                duration: v.duration });
    }, { once: true });
    v.addEventListener('error', () => reject(new Error('cannot decode the video')), { once: true });
    v.src = url;
  });
}

// An image's or a video's tile in the tray (a document's chip: Documents.chip).
function mediaThumb(att) {
  const box = document.createElement('div');
  box.className = 'thumb';
  box.title = att.name + (att.width ? ' (' + att.width + '×' + att.height + ')' : '');
  const img = document.createElement('img');
  img.alt = att.name;
  if (att.kind === 'video') {
    box.classList.add('video');
    if (att.poster) img.src = att.poster;
    if (att.duration) box.title += ', ' + att.duration.toFixed(1) + ' s';
  } else {
    img.src = att.thumb;
  }
  box.append(img);
  return box;
}

function renderAttachments() {
  el.attachments.replaceChildren(...state.attachments.map((att) => {
    const box = att.kind === 'document' ? Documents.chip(att) : mediaThumb(att);
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.className = 'remove';
    remove.textContent = '×';
    remove.title = 'Remove ' + att.name;
    remove.addEventListener('click', () => {
      URL.revokeObjectURL(att.thumb);
      state.attachments = state.attachments.filter((a) => a !== att);
      renderAttachments();
    });
    box.append(remove);
    return box;
  }));
  el.attachments.hidden = state.attachments.length === 0;
}

function loadImage(url) {
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => reject(new Error('cannot decode the image'));
    img.src = url;
  });
}

function readAsDataUrl(blob) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.readAsDataURL(blob);
  });
}

// The image as a data: URI, scaled down in the browser when it has more pixels than the resolution
// setting allows (the server's API has no per-request pixel limit; its own --max-pixels still applies).
async function encodeForUpload(att, limit) {
  if (att.kind === 'document') return att.dataUrl;  // read once already, for its preview
  const original = await readAsDataUrl(att.file);
  if (att.kind === 'video') {
    // Sent as it is: the server samples its frames and sizes them (the clip's own pixel budget).
    return original.replace(/^data:[^;,]*;base64,/, 'data:' + (att.file.type || 'video/mp4') + ';base64,');
  }
  const w = att.width, h = att.height;
  if (att.undecodable || !limit || !w || w * h <= limit) {
    // The server sniffs the format from the bytes; it only needs a base64 data: URI.
    return original.replace(/^data:[^;,]*;base64,/, 'data:' + (att.file.type || 'image/unknown') + ';base64,');
  }
  const scale = Math.sqrt(limit / (w * h));
  const canvas = document.createElement('canvas');
  canvas.width = Math.max(1, Math.floor(w * scale));
  canvas.height = Math.max(1, Math.floor(h * scale));
  const ctx = canvas.getContext('2d');
  ctx.fillStyle = '#fff';  // transparent pixels become white, not black, in the JPEG
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.imageSmoothingQuality = 'high';
  ctx.drawImage(await loadImage(att.thumb), 0, 0, canvas.width, canvas.height);
  return canvas.toDataURL('image/jpeg', 0.92);
}

// ---------------------------------------------------------------------------------------------------
// The conversation on screen.

function nearBottom() {
  const m = el.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 120;
}

function scrollToEnd() { el.messages.scrollTop = el.messages.scrollHeight; }

function addUserBubble(text, attachments) {
  el.empty.hidden = true;
  const msg = document.createElement('div');
  msg.className = 'msg user';
  if (attachments.length) {
    const images = document.createElement('div');
    images.className = 'images';
    for (const att of attachments) {
      if (att.kind === 'video') {
        const video = document.createElement('video');
        video.controls = true;
        video.muted = true;
        video.preload = 'metadata';
        if (att.poster) video.poster = att.poster;
        video.src = att.thumb;
        video.title = att.name;
        images.append(video);
      } else if (att.kind === 'document') {
        images.append(Documents.bubble(att));
      } else {
        const img = document.createElement('img');
        img.src = att.thumb;
        img.alt = att.name;
        img.title = att.name;
        images.append(img);
      }
      state.objectUrls.push(att.thumb);
    }
    msg.append(images);
  }
  if (text) {
    const body = document.createElement('div');
    body.className = 'content';
    body.textContent = text;  // the user's own words, shown as typed
    msg.append(body);
  }
  el.messages.append(msg);
  scrollToEnd();
  return msg;
}

function addAssistantBubble() {
  const msg = document.createElement('div');
  msg.className = 'msg assistant';
  msg.dataset.state = 'waiting';
  const content = document.createElement('div');
  content.className = 'content';
  const waiting = document.createElement('span');
  waiting.className = 'waiting';
  waiting.textContent = 'Waiting for the model';
  content.append(waiting);
  const error = document.createElement('div');
  error.className = 'error';
  error.hidden = true;
  const stats = document.createElement('div');
  stats.className = 'stats';
  // A Thinking model's reasoning (reasoning_content), folded away above the answer; text only, never markup.
  const thinking = document.createElement('details');
  thinking.className = 'thinking';
  thinking.hidden = true;
  const summary = document.createElement('summary');
  summary.textContent = 'Thinking';
  const thinkingText = document.createElement('div');
  thinkingText.className = 'thinking-text';
  thinking.append(summary, thinkingText);
  msg.append(thinking, content, error, stats);
  el.messages.append(msg);
  scrollToEnd();
  return { msg, content, error, stats, thinking, thinkingText };
}

function fmtMs(ms) { return ms >= 1000 ? (ms / 1000).toFixed(2) + ' s' : Math.round(ms) + ' ms'; }

// "first token 0.46 s · 11.9 tokens/s · 24 tokens": the server's timings when the answer ended normally,
// else what the page measured itself (a stopped answer has no final chunk).
function statsText(r) {
  const t = r.timings;
  const parts = [];
  const ttft = t && t.predicted_n > 0 ? t.ttft_ms : r.tFirst ? r.tFirst - r.t0 : null;
  if (ttft !== null) parts.push('first token ' + fmtMs(ttft));
  let rate = t && t.predicted_per_second > 0 ? t.predicted_per_second : 0;
  if (!rate && r.pieces > 1 && r.tEnd > r.tFirst) rate = (r.pieces - 1) * 1000 / (r.tEnd - r.tFirst);
  if (rate) parts.push(rate.toFixed(1) + ' tokens/s');
  const n = r.usage ? r.usage.completion_tokens : t ? t.predicted_n : r.pieces;
  parts.push(n + (n === 1 ? ' token' : ' tokens') + (r.usage || t ? '' : ' (about)'));
  if (t && t.image_tokens) parts.push(t.image_tokens + ' image tokens');
  if (t && t.video_tokens) parts.push(t.video_frames + ' video frames, ' + t.video_tokens + ' video tokens');
  if (r.finish === 'length') parts.push('stopped at max tokens');
  if (r.stopped) parts.push('stopped');
  return { text: parts.join(' · '), ttft, rate };
}

// ---------------------------------------------------------------------------------------------------
// Sending: POST /v1/chat/completions with stream: true, read as Server-Sent Events.

class HttpError extends Error {
  constructor(status, message, code, retryAfter) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

async function httpError(res) {
  let message = res.statusText || 'error', code = null;
  try {
    const j = await res.json();
    if (j && j.error) {
      message = typeof j.error === 'string' ? j.error : j.error.message || message;
      code = typeof j.error === 'object' ? j.error.code : null;
    }
  } catch (e) { /* not JSON */ }
  return new HttpError(res.status, message, code, res.headers.get('Retry-After'));
}

function describeError(e) {
  if (!(e instanceof HttpError)) {
    return 'Cannot reach the server (' + (e && e.message ? e.message : e) + '). Is qvl serve still running?';
  }
  switch (e.status) {
    case 503:
      if (e.code === 'loading') return 'The model is still loading. Try again when the status says ready.';
      if (/shut/i.test(e.message)) return 'The server is shutting down.';
      return 'The server is busy: every slot is taken and its queue is full. Try again in ' +
        (e.retryAfter ? e.retryAfter + ' s' : 'a few seconds') + '. (' + e.message + ')';
    case 401: return 'The server needs an API key: enter it under Settings. (' + e.message + ')';
    case 413: return 'The request is too large for the server: choose a lower image resolution under Settings, or attach fewer images or documents. (' + e.message + ')';
    case 504: return 'The server stopped the request because it took too long: ' + e.message;
    default:
      if (e.status >= 400 && e.status < 500) return 'The server refused the request: ' + e.message;
      return 'Server error ' + e.status + ': ' + e.message;
  }
}

// Calls onEvent(json) for every `data:` event until [DONE].
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let nl;
    while ((nl = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, '');
      buffer = buffer.slice(nl + 1);
      if (!line.startsWith('data:')) continue;
      const data = line.slice(5).trim();
      if (data === '[DONE]') return;
      let event;
      try { event = JSON.parse(data); } catch (e) { continue; }
      onEvent(event);
    }
    if (done) return;
  }
}

// Sends the composer's message, or `preset` ({text, parts}: a turn sent again, its pictures already encoded:
// regenerate, edit and resend), after the conversation's turns.
async function send(preset) {
  const text = preset ? preset.text : el.prompt.value.trim();
  if (state.controller || state.server !== 'ready') return;
  if (!preset && !text && state.attachments.length === 0) return;
  const unready = preset ? '' : Documents.unready(state.attachments);  // a PDF still read, or no page chosen
  if (unready) return notice(unready);
  const attachments = preset  // a part as it was sent: a document keeps its pages (Documents.fieldsOf)
    ? preset.parts.map((p) => ({ ...p, thumb: p.url, poster: p.poster || null, sent: p.url }))
    : state.attachments;
  if (!preset) {
    state.attachments = [];
    renderAttachments();
    el.prompt.value = '';
    autoGrow();
  }

  const chat = state.chat;
  const conversation = state.conversation;
  const userBubble = addUserBubble(text, attachments);
  const bubble = addAssistantBubble();
  const controller = new AbortController();
  state.controller = controller;
  updateButtons();

  const r = { t0: performance.now(), tFirst: 0, tEnd: 0, pieces: 0, answer: '', reasoning: '', timings: null, usage: null, finish: null, stopped: false };
  let failure = null, started = false, frame = 0;
  const draw = () => {
    frame = 0;
    const stick = nearBottom();
    bubble.content.innerHTML = renderMarkdown(r.answer);
    if (stick) scrollToEnd();
  };
  const user = { text, parts: [] };
  try {
    const uploads = await Promise.all(attachments.map((a) => a.sent || encodeForUpload(a, maxPixels())));
    user.parts = uploads.map((url, k) => ({ kind: attachments[k].kind, url, name: attachments[k].name,
                                            poster: attachments[k].poster || null, ...Documents.fieldsOf(attachments[k], maxPixels()) }));
    const pictures = user.parts.filter((p) => p.kind === 'image');
    if (pictures.length) state.lastImage = pictures[pictures.length - 1].url;  // what boxes in later answers refer to
    const system = el.system.value.trim();
    const body = {
      model: state.model || 'qwen3-vl',
      messages: [...(system ? [{ role: 'system', content: system }] : []), ...historyOf(conversation), userMessageOf(user)],
      stream: true,
      stream_options: { include_usage: true },
      temperature: Number(el.temperature.value),
      max_tokens: maxTokens(),
      ...samplingFields(),
    };
    const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) throw await httpError(res);
    started = true;
    scheduleHealth(300);  // the status line shows the slot busy
    bubble.msg.dataset.state = 'streaming';
    const waiting = bubble.content.querySelector('.waiting');
    if (waiting) waiting.textContent = 'Reading the prompt';
    await readEvents(res, (ev) => {
      if (ev.error) {
        failure = new HttpError(ev.error.code === 'timeout' ? 504 : 500, ev.error.message || String(ev.error), ev.error.code);
        return;
      }
      if (ev.usage) r.usage = ev.usage;
      const choice = ev.choices && ev.choices[0];
      if (!choice) return;
      if (ev.timings) r.timings = ev.timings;
      if (choice.finish_reason) r.finish = choice.finish_reason;
      const thought = choice.delta && choice.delta.reasoning_content;
      if (thought) {
        if (!r.tFirst) r.tFirst = performance.now();
        r.pieces++;
        r.reasoning += thought;
        bubble.thinking.hidden = false;
        bubble.thinkingText.textContent = r.reasoning;
        const waiting = bubble.content.querySelector('.waiting');
        if (waiting) waiting.textContent = 'Thinking';
      }
      const piece = choice.delta && choice.delta.content;
      if (piece) {
        if (!r.tFirst) r.tFirst = performance.now();
        r.pieces++;
        r.answer += piece;
        if (!frame) frame = requestAnimationFrame(draw);
      }
    });
  } catch (e) {
    if (e && e.name === 'AbortError') r.stopped = true; else failure = e;
  }
  r.tEnd = performance.now();
  if (frame) cancelAnimationFrame(frame);
  draw();
  state.controller = null;
  updateButtons();
  scheduleHealth(200);  // the status line: busy or ready again
  const s = statsText(r);
  if (chat !== state.chat) {  // another conversation is shown now: the answer is kept in its own
    if (r.answer || r.reasoning) {
      conversation.turns.push({ user, assistant: { text: r.answer, reasoning: r.reasoning, stats: s.text } });
      Conversations.save(conversation).then(renderChatList);
    }
    return;
  }

  if (r.answer || r.reasoning) {
    // The answer so far (whole, stopped or cut by an error) is part of the conversation, kept in this browser.
    conversation.turns.push({ user, assistant: { text: r.answer, reasoning: r.reasoning, stats: s.text } });
    state.bubbles.push({ user: userBubble, assistant: bubble.msg });
    Conversations.save(conversation).then(renderChatList);
    addActions();
    const marks = parseGrounding(r.answer);
    if (marks.length && state.lastImage) renderGrounding(bubble.msg, marks, state.lastImage);
  } else {
    // Nothing came back: this turn is not part of the conversation; give its text and images back to retry.
    userBubble.classList.add('dropped');
    userBubble.title = 'Not part of the conversation: no answer came back';
    if (!el.prompt.value) { el.prompt.value = text; autoGrow(); }
    if (!state.attachments.length && attachments.length && !preset) {
      state.attachments = attachments.map((a) => ({ ...a, thumb: URL.createObjectURL(a.file) }));
      renderAttachments();
    }
    bubble.content.textContent = r.stopped ? 'Stopped before the first token.' : '';
  }
  if (failure) {
    bubble.error.textContent = describeError(failure);
    bubble.error.hidden = false;
  }
  if (started || r.stopped) {
    bubble.stats.textContent = s.text;
    if (s.ttft !== null) bubble.stats.dataset.ttftMs = Math.round(s.ttft);
    if (s.rate) bubble.stats.dataset.tokensPerSecond = s.rate.toFixed(2);
  }
  bubble.msg.dataset.state = failure ? 'error' : r.stopped ? 'stopped' : 'done';
  if (nearBottom()) scrollToEnd();
}

function stop() {
  if (state.controller) state.controller.abort();
}

// Shows `conversation` (a new one when null): its turns drawn again, the list updated.
function showConversation(conversation) {
  stop();
  state.chat++;
  state.conversation = conversation || Conversations.create();
  state.bubbles = [];
  state.lastImage = null;
  for (const url of state.objectUrls) URL.revokeObjectURL(url);
  state.objectUrls = [];
  el.messages.replaceChildren(el.empty);
  el.empty.hidden = state.conversation.turns.length > 0;
  for (const turn of state.conversation.turns) {
    const user = addUserBubble(turn.user.text, turn.user.parts.map((p) => ({ ...p, thumb: p.url })));
    const b = addAssistantBubble();
    b.content.innerHTML = renderMarkdown(turn.assistant.text);
    if (turn.assistant.reasoning) {
      b.thinking.hidden = false;
      b.thinkingText.textContent = turn.assistant.reasoning;
    }
    b.stats.textContent = turn.assistant.stats || '';
    b.msg.dataset.state = 'done';
    state.bubbles.push({ user, assistant: b.msg });
    const pictures = turn.user.parts.filter((p) => p.kind === 'image');
    if (pictures.length) state.lastImage = pictures[pictures.length - 1].url;
  }
  addActions();
  renderChatList();
  scrollToEnd();
}

function newChat() {
  showConversation(null);
  el.prompt.focus();
}

function renderChatList() {
  Conversations.render(el.chatList, state.conversation.id, {
    open: (id) => { if (id !== state.conversation.id) showConversation(Conversations.get(id)); },
    deleted: (id) => {
      if (id === state.conversation.id) showConversation(Conversations.list()[0] || null);
      else renderChatList();
    },
  });
}

// The buttons under each turn: Edit on a message (resend it changed, the turns after it dropped), Copy on an
// answer, Regenerate on the last one.
function addActions() {
  for (const old of el.messages.querySelectorAll('.actions')) old.remove();
  state.bubbles.forEach(({ user, assistant }, k) => {
    const last = k === state.bubbles.length - 1;
    const button = (label, title, onClick) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = label;
      b.title = title;
      b.className = label.toLowerCase();
      b.addEventListener('click', onClick);
      return b;
    };
    const userBar = document.createElement('div');
    userBar.className = 'actions';
    userBar.append(button('Edit', 'Change this message and send it again (the turns after it are dropped)', () => editTurn(k)));
    user.append(userBar);
    const answerBar = document.createElement('div');
    answerBar.className = 'actions';
    answerBar.append(button('Copy', 'Copy the answer', (e) => copyText(e.target, state.conversation.turns[k].assistant.text)));
    if (last) answerBar.append(button('Regenerate', 'Ask for another answer to the last message', regenerate));
    assistant.append(answerBar);
  });
}

// Drops turns k.. from the conversation and the screen; returns turn k.
function dropFrom(k) {
  const turn = state.conversation.turns[k];
  state.conversation.turns.length = k;
  for (const { user, assistant } of state.bubbles.splice(k)) {
    user.remove();
    assistant.remove();
  }
  Conversations.save(state.conversation);  // a resend that then fails leaves the conversation as shown
  return turn;
}

function regenerate() {
  if (state.controller || !state.conversation.turns.length) return;
  const turn = dropFrom(state.conversation.turns.length - 1);
  send({ text: turn.user.text, parts: turn.user.parts });
}

function editTurn(k) {
  if (state.controller) return;
  const { user } = state.bubbles[k];
  const turn = state.conversation.turns[k];
  const box = document.createElement('div');
  box.className = 'editing';
  const input = document.createElement('textarea');
  input.value = turn.user.text;
  input.setAttribute('aria-label', 'Edit the message');
  const resend = document.createElement('button');
  resend.type = 'button';
  resend.className = 'primary';
  resend.textContent = 'Send';
  const cancel = document.createElement('button');
  cancel.type = 'button';
  cancel.textContent = 'Cancel';
  box.append(input, resend, cancel);
  const hidden = [...user.children];
  for (const c of hidden) c.hidden = true;
  user.append(box);
  input.focus();
  cancel.addEventListener('click', () => { box.remove(); for (const c of hidden) c.hidden = false; });
  resend.addEventListener('click', () => {
    const text = input.value.trim();
    if (!text && !turn.user.parts.length) return;
    dropFrom(k);
    send({ text, parts: turn.user.parts });
  });
}

async function copyText(button, text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {  // not a secure context: the old command, through a hidden text box
    const area = document.createElement('textarea');
    area.value = text;
    area.setAttribute('readonly', '');
    area.style.position = 'fixed';
    area.style.opacity = '0';
    document.body.append(area);
    area.select();
    document.execCommand('copy');
    area.remove();
  }
  button.textContent = 'Copied';
  setTimeout(() => { button.textContent = 'Copy'; }, 1500);
}

function autoGrow() {
  el.prompt.style.height = 'auto';
  el.prompt.style.height = Math.min(el.prompt.scrollHeight, window.innerHeight * 0.4) + 'px';
}

async function copyCode(button) {
  const code = button.parentElement.querySelector('code');
  const text = code ? code.textContent : '';
  try {
    await navigator.clipboard.writeText(text);
  } catch (e) {  // not a secure context: select the text and use the old command
    const range = document.createRange();
    range.selectNodeContents(code);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    document.execCommand('copy');
  }
  button.textContent = 'Copied';
  setTimeout(() => { button.textContent = 'Copy'; }, 1500);
}

// ---------------------------------------------------------------------------------------------------
// Wiring.

function hasFiles(e) { return e.dataTransfer && [...e.dataTransfer.types].includes('Files'); }

el.composer.addEventListener('submit', (e) => { e.preventDefault(); send(); });
// Enter sends (Shift+Enter: a new line); on a touch screen Enter is a new line and the Send button sends.
const touchScreen = window.matchMedia('(pointer: coarse)').matches;
el.prompt.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !touchScreen) { e.preventDefault(); send(); }
});
el.prompt.addEventListener('input', autoGrow);
el.stop.addEventListener('click', stop);
el.newChat.addEventListener('click', newChat);
el.chatsToggle.addEventListener('click', () => {
  el.chats.hidden = !el.chats.hidden;
  el.chatsToggle.setAttribute('aria-expanded', String(!el.chats.hidden));
});
el.fileInput.addEventListener('change', () => { addFiles([...el.fileInput.files]); el.fileInput.value = ''; });
el.settingsToggle.addEventListener('click', () => {
  el.settings.hidden = !el.settings.hidden;
  el.settingsToggle.setAttribute('aria-expanded', String(!el.settings.hidden));
});
for (const input of [el.temperature, el.maxTokens, el.resolution, el.apiKey, el.system, el.topP, el.topK, el.seed]) {
  input.addEventListener('input', saveSettings);
}
el.messages.addEventListener('click', (e) => {
  const button = e.target.closest('button.copy');
  if (button) copyCode(button);
});

let dragDepth = 0;
window.addEventListener('dragenter', (e) => { if (hasFiles(e)) { dragDepth++; el.dropOverlay.hidden = false; } });
window.addEventListener('dragleave', () => { if (--dragDepth <= 0) { dragDepth = 0; el.dropOverlay.hidden = true; } });
window.addEventListener('dragover', (e) => { if (hasFiles(e)) e.preventDefault(); });
window.addEventListener('drop', (e) => {
  dragDepth = 0;
  el.dropOverlay.hidden = true;
  if (!e.dataTransfer || e.dataTransfer.files.length === 0) return;
  e.preventDefault();
  addFiles([...e.dataTransfer.files]);
});
document.addEventListener('paste', (e) => {
  const data = e.clipboardData;
  if (!data) return;
  let files = [...data.files];
  if (files.length === 0) files = [...data.items].filter((i) => i.kind === 'file').map((i) => i.getAsFile()).filter(Boolean);
  if (files.length === 0) return;  // plain text: let the textarea have it
  e.preventDefault();
  addFiles(files);
});

loadSettings();
updateButtons();
pollHealth();
// The conversations kept in this browser: the latest one is shown again after a reload.
const conversationsLoaded = Conversations.load().then((list) => {
  if (list.length && state.conversation.turns.length === 0 && !state.controller) showConversation(list[0]);
  else renderChatList();
});

// For tests and the curious: the renderer, the page's state and the conversations.
window.qvl = { renderMarkdown, escapeHtml, state, pollHealth, parseGrounding, renderGrounding, Conversations,
               conversationsLoaded };
