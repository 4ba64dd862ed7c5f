// The chat page's logic: server status, attachments, the streamed OpenAI chat request, and a small
// Markdown renderer that escapes all HTML before it adds any formatting of its own.
'use strict';

// ---------------------------------------------------------------------------------------------------
// Markdown: escape first, then format. Every tag in the output is one this code writes; the only text
// from the model inside an attribute is a link's URL (already escaped, http(s)/mailto only) and a code
// block's language (letters, digits, + # . - only).

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}

// Inline spans of one escaped paragraph: `code`, [links](https://...), **bold**, *italic*, ~~strike~~.
function renderInline(text) {
  const stash = [];  // code spans and link tags, kept away from the other rules
  const keep = (html) => '\u0000' + (stash.push(html) - 1) + '\u0000';
  text = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (m, ticks, code) => keep('<code>' + code.trim() + '</code>'));
  text = text.replace(/\[([^\]\n]+)\]\(\s*((?:https?:\/\/|mailto:)[^\s()]+)\s*\)/gi,
    (m, label, url) => keep('<a href="' + url + '" target="_blank" rel="noopener noreferrer">') + label + keep('</a>'));
  text = text.replace(/(^|[^\w&])(https?:\/\/[^\s<]*[^\s<.,;:!?)\]'"*_~&])/g,
    (m, before, url) => before + keep('<a href="' + url + '" target="_blank" rel="noopener noreferrer">' + url + '</a>'));
  text = text.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>');
  text = text.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>');
  text = text.replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?![*\w])/g, '$1<em>$2</em>');
  text = text.replace(/(^|[^\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>');
  text = text.replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>');
  return text.replace(/\u0000(\d+)\u0000/g, (m, i) => stash[Number(i)]);
}

const FENCE_RE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING_RE = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const RULE_RE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE_RE = /^ {0,3}&gt; ?/;
const LIST_RE = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_SEP_RE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

function isBlank(line) { return /^\s*$/.test(line); }

function startsTable(lines, i) {
  return i + 1 < lines.length && lines[i].includes('|') && TABLE_SEP_RE.test(lines[i + 1]) &&
    (lines[i + 1].includes('|') || lines[i].trim().startsWith('|'));
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE_RE.test(line) || HEADING_RE.test(line) || RULE_RE.test(line) || QUOTE_RE.test(line) ||
    LIST_RE.test(line) || startsTable(lines, i);
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function renderTable(lines, i, out) {
  const head = splitRow(lines[i]);
  const align = splitRow(lines[i + 1]).map((c) => {
    const left = c.startsWith(':'), right = c.endsWith(':');
    return left && right ? ' class="al-c"' : right ? ' class="al-r"' : '';
  });
  const cell = (tag, text, k) => '<' + tag + (align[k] || '') + '>' + renderInline(text) + '</' + tag + '>';
  let html = '<div class="table-wrap"><table><thead><tr>' + head.map((c, k) => cell('th', c, k)).join('') + '</tr></thead><tbody>';
  i += 2;
  while (i < lines.length && !isBlank(lines[i]) && lines[i].includes('|')) {
    const row = splitRow(lines[i]);
    html += '<tr>' + head.map((_, k) => cell('td', row[k] || '', k)).join('') + '</tr>';
    i++;
  }
  out.push(html + '</tbody></table></div>');
  return i;
}

function indentOf(line) { return line.match(/^\s*/)[0].replace(/\t/g, '    ').length; }

function renderList(lines, i, out) {
  const first = lines[i].match(LIST_RE);
  const ordered = /\d/.test(first[2]);
  const base = indentOf(lines[i]);
  const items = [];
  while (i < lines.length) {
    const line = lines[i];
    const m = line.match(LIST_RE);
    const indent = indentOf(line);
    if (m && indent <= base + 1 && /\d/.test(m[2]) === ordered) {
      items.push([m[3]]);
      i++;
    } else if (isBlank(line)) {
      // A blank line inside a list: the list goes on if the next line is indented or another item.
      let j = i + 1;
      while (j < lines.length && isBlank(lines[j])) j++;
      const next = j < lines.length ? lines[j].match(LIST_RE) : null;
      const goesOn = j < lines.length && (indentOf(lines[j]) > base + 1 || (next && /\d/.test(next[2]) === ordered));
      if (!goesOn) break;
      items[items.length - 1].push('');
      i++;
    } else if (indent > base + 1 || (indent > base && !startsBlock(lines, i))) {
      items[items.length - 1].push(line.slice(Math.min(indent, base + 2)));  // nested or continued
      i++;
    } else {
      break;  // not indented under the list, or the other kind of list
    }
  }
  const start = ordered ? parseInt(first[2], 10) : 1;
  let html = ordered ? (start !== 1 ? '<ol start="' + start + '">' : '<ol>') : '<ul>';
  for (const item of items) {
    // The item's first paragraph inline; anything after it (nested lists, code) as blocks.
    let k = 1;
    while (k < item.length && !isBlank(item[k]) && !startsBlock(item, k)) k++;
    html += '<li>' + renderInline(item.slice(0, k).join('\n')).replace(/\n/g, '<br>');
    if (k < item.length) html += renderBlocks(item.slice(k));
    html += '</li>';
  }
  out.push(html + (ordered ? '</ol>' : '</ul>'));
  return i;
}

// Block structure of escaped lines: fenced code, headings, rules, quotes, lists, tables, paragraphs.
function renderBlocks(lines) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = line.match(FENCE_RE))) {
      const fence = m[1];
      const close = new RegExp('^ {0,3}' + fence[0] + '{' + fence.length + ',}\\s*$');
      const body = [];
      for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i]);
      i++;  // the closing fence; while an answer streams in, the block runs to the end
      const lang = m[2] ? '<span class="lang">' + m[2] + '</span>' : '';
      out.push('<div class="code">' + lang + '<button type="button" class="copy">Copy</button><pre><code>' +
        body.join('\n') + '</code></pre></div>');
    } else if (isBlank(line)) {
      i++;
    } else if ((m = line.match(HEADING_RE))) {
      const n = m[1].length;
      out.push('<h' + n + '>' + renderInline(m[2]) + '</h' + n + '>');
      i++;
    } else if (RULE_RE.test(line)) {
      out.push('<hr>');
      i++;
    } else if (QUOTE_RE.test(line)) {
      const body = [];
      for (; i < lines.length && !isBlank(lines[i]) && (QUOTE_RE.test(lines[i]) || !startsBlock(lines, i)); i++) {
        body.push(lines[i].replace(QUOTE_RE, ''));
      }
      out.push('<blockquote>' + renderBlocks(body) + '</blockquote>');
    } else if (startsTable(lines, i)) {
      i = renderTable(lines, i, out);
    } else if (LIST_RE.test(line)) {
      i = renderList(lines, i, out);
    } else {
      const para = [line];
      for (i++; i < lines.length && !isBlank(lines[i]) && !startsBlock(lines, i); i++) para.push(lines[i]);
      out.push('<p>' + renderInline(para.join('\n')).replace(/\n/g, '<br>') + '</p>');
    }
  }
  return out.join('');
}

function renderMarkdown(source) {
  const text = String(source).replace(/\r\n?/g, '\n').replace(/\u0000/g, '');
  return renderBlocks(escapeHtml(text).split('\n'));
}

// ---------------------------------------------------------------------------------------------------
// Page state and elements.

const $ = (id) => document.getElementById(id);
const el = {
  status: $('status'), banner: $('banner'), messages: $('messages'), empty: $('empty'), composer: $('composer'),
  prompt: $('prompt'), send: $('send'), stop: $('stop'), fileInput: $('file-input'), attachments: $('attachments'),
  newChat: $('new-chat'), settings: $('settings'), settingsToggle: $('settings-toggle'), temperature: $('temperature'),
  temperatureValue: $('temperature-value'), maxTokens: $('max-tokens'), resolution: $('resolution'), apiKey: $('api-key'),
  dropOverlay: $('drop-overlay'),
};

const state = {
  server: 'connecting',   // connecting | loading | ready | failed | offline | shutting_down
  serverMessage: '',
  model: '',
  chat: 0,                // which conversation: New chat counts up, so a late answer cannot join the next one
  history: [],            // OpenAI messages of the conversation so far
  attachments: [],        // {file, thumb (object URL), name, width, height}
  controller: null,       // AbortController of the request in flight
  notice: '', noticeTimer: 0,
  objectUrls: [],         // thumbnails shown in the conversation, released on New chat
  lastImage: null,        // the data URL of the latest image sent: the one boxes in answers refer to
};

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
    el.apiKey.value = sessionStorage.getItem('qvl.apiKey') || '';
  } catch (e) { /* storage unavailable: defaults */ }
  el.temperatureValue.textContent = Number(el.temperature.value).toFixed(2);
}

function saveSettings() {
  el.temperatureValue.textContent = Number(el.temperature.value).toFixed(2);
  try {
    localStorage.setItem(SETTINGS_KEY, JSON.stringify({
      temperature: Number(el.temperature.value), maxTokens: Number(el.maxTokens.value), resolution: el.resolution.value,
    }));
    sessionStorage.setItem('qvl.apiKey', el.apiKey.value);
  } catch (e) { /* storage unavailable */ }
}

function maxTokens() {
  const n = Math.floor(Number(el.maxTokens.value));
  return Number.isFinite(n) && n >= 1 ? n : 512;
}

function maxPixels() { return Number(el.resolution.value) || 0; }

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

function addFiles(files) {
  for (const file of files) {
    const video = isVideo(file);
    if (!video && !(file.type || '').startsWith('image/') && !IMAGE_NAME_RE.test(file.name || '')) {
      notice((file.name || 'That file') + ' is not an image or a video; attach JPEG, PNG, WebP, GIF or BMP ' +
             'pictures, or MP4, WebM, MKV or MOV clips.');
      continue;
    }
    const att = { file, kind: video ? 'video' : 'image', name: file.name || (video ? 'video' : 'pasted image'),
                  thumb: URL.createObjectURL(file), poster: null, width: 0, height: 0, duration: 0 };
    state.attachments.push(att);
    const ready = video
      ? posterFrame(att.thumb).then((p) => Object.assign(att, p))
      : loadImage(att.thumb).then((img) => { att.width = img.naturalWidth; att.height = img.naturalHeight; });
    ready.then(renderAttachments).catch(() => { att.undecodable = true; renderAttachments(); });
  }
  renderAttachments();
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

function renderAttachments() {
  el.attachments.replaceChildren(...state.attachments.map((att, k) => {
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
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.className = 'remove';
    remove.textContent = '×';
    remove.title = 'Remove ' + att.name;
    remove.addEventListener('click', () => {
      URL.revokeObjectURL(att.thumb);
      state.attachments.splice(k, 1);
      renderAttachments();
    });
    box.append(img, remove);
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
    case 413: return 'The request is too large for the server: choose a lower image resolution under Settings, or attach fewer images. (' + e.message + ')';
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

// Qwen3-VL's grounding: JSON in the answer (often in a ```json block) with "bbox_2d": [x1, y1, x2, y2] or
// "point_2d": [x, y], in the model's 0-1000 coordinates of the image, and usually a "label".
function parseGrounding(text) {
  const candidates = [];
  for (const m of text.matchAll(/```(?:json)?\s*\n([\s\S]*?)(?:```|$)/g)) candidates.push(m[1]);
  const first = text.search(/[[{]/), last = Math.max(text.lastIndexOf(']'), text.lastIndexOf('}'));
  if (first >= 0 && last > first) candidates.push(text.slice(first, last + 1));
  const items = [];
  const num = (v) => typeof v === 'number' && Number.isFinite(v);
  const clamp = (v) => Math.min(1000, Math.max(0, v));
  const visit = (v, depth) => {
    if (depth > 8 || v === null || typeof v !== 'object') return;
    if (Array.isArray(v)) { for (const x of v) visit(x, depth + 1); return; }
    const label = typeof v.label === 'string' ? v.label : '';
    const b = v.bbox_2d, p = v.point_2d;
    if (Array.isArray(b) && b.length === 4 && b.every(num)) {
      items.push({ kind: 'box', x1: clamp(Math.min(b[0], b[2])), y1: clamp(Math.min(b[1], b[3])),
                   x2: clamp(Math.max(b[0], b[2])), y2: clamp(Math.max(b[1], b[3])), label });
    } else if (Array.isArray(p) && p.length === 2 && p.every(num)) {
      items.push({ kind: 'point', x: clamp(p[0]), y: clamp(p[1]), label });
    } else {
      for (const x of Object.values(v)) visit(x, depth + 1);
    }
  };
  for (const c of candidates) {
    let parsed;
    try { parsed = JSON.parse(c); } catch (e) { continue; }
    visit(parsed, 0);
    if (items.length) break;
  }
  return items.slice(0, 200);
}

const MARK_COLOURS = ['#e6194b', '#3cb44b', '#4363d8', '#f58231', '#911eb4', '#42d4f4', '#f032e6', '#9a6324'];

// Draws the boxes and points over the image they refer to, below the answer, with a button to hide them.
function renderGrounding(msg, items, imageUrl) {
  const fig = document.createElement('figure');
  fig.className = 'grounding';
  const frame = document.createElement('div');
  frame.className = 'frame';
  const img = document.createElement('img');
  img.src = imageUrl;
  img.alt = 'The image the answer refers to, with its boxes';
  frame.append(img);
  items.forEach((it, i) => {
    const mark = document.createElement('div');
    mark.className = it.kind === 'box' ? 'mark box' : 'mark point';
    const colour = MARK_COLOURS[i % MARK_COLOURS.length];
    if (it.kind === 'box') {
      Object.assign(mark.style, { left: it.x1 / 10 + '%', top: it.y1 / 10 + '%', width: (it.x2 - it.x1) / 10 + '%',
                                  height: (it.y2 - it.y1) / 10 + '%', borderColor: colour });
    } else {
      Object.assign(mark.style, { left: it.x / 10 + '%', top: it.y / 10 + '%', background: colour });
    }
    if (it.label) {
      const label = document.createElement('span');
      label.className = 'label';
      label.textContent = it.label;  // the model's text, never markup
      label.style.background = colour;
      mark.append(label);
    }
    frame.append(mark);
  });
  const toggle = document.createElement('button');
  toggle.type = 'button';
  toggle.className = 'toggle-marks';
  toggle.textContent = 'Hide boxes';
  toggle.setAttribute('aria-pressed', 'true');
  toggle.addEventListener('click', () => {
    const hidden = fig.classList.toggle('marks-hidden');
    toggle.textContent = hidden ? 'Show boxes' : 'Hide boxes';
    toggle.setAttribute('aria-pressed', hidden ? 'false' : 'true');
  });
  const caption = document.createElement('figcaption');
  caption.append(toggle);
  fig.append(frame, caption);
  const stats = msg.querySelector('.stats');
  msg.insertBefore(fig, stats);
  return fig;
}

async function send() {
  const text = el.prompt.value.trim();
  if ((!text && state.attachments.length === 0) || state.controller || state.server !== 'ready') return;
  const attachments = state.attachments;
  state.attachments = [];
  renderAttachments();
  el.prompt.value = '';
  autoGrow();

  const chat = state.chat;
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
  const userMessage = { role: 'user', content: text };
  try {
    const uploads = await Promise.all(attachments.map((a) => encodeForUpload(a, maxPixels())));
    if (uploads.length) {
      const pictures = uploads.filter((url, k) => attachments[k].kind !== 'video');
      if (pictures.length) state.lastImage = pictures[pictures.length - 1];  // what boxes in later answers refer to
      userMessage.content = uploads.map((url, k) => attachments[k].kind === 'video'
        ? { type: 'video_url', video_url: { url } }
        : { type: 'image_url', image_url: { url } });
      if (text) userMessage.content.push({ type: 'text', text });
    }
    const body = {
      model: state.model || 'qwen3-vl',
      messages: [...state.history, userMessage],
      stream: true,
      stream_options: { include_usage: true },
      temperature: Number(el.temperature.value),
      max_tokens: maxTokens(),
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
  if (chat !== state.chat) return;  // New chat was pressed meanwhile: this answer belongs to nothing now

  if (r.answer || r.reasoning) {
    // The answer so far (whole, stopped or cut by an error) is part of the conversation.
    const said = { role: 'assistant', content: r.answer };
    if (r.reasoning) said.reasoning_content = r.reasoning;
    state.history.push(userMessage, said);
    const marks = parseGrounding(r.answer);
    if (marks.length && state.lastImage) renderGrounding(bubble.msg, marks, state.lastImage);
  } else {
    // Nothing came back: this turn is not part of the conversation; give its text and images back to retry.
    userBubble.classList.add('dropped');
    userBubble.title = 'Not part of the conversation: no answer came back';
    if (!el.prompt.value) { el.prompt.value = text; autoGrow(); }
    if (!state.attachments.length && attachments.length) {
      state.attachments = attachments.map((a) => ({ ...a, thumb: URL.createObjectURL(a.file) }));
      renderAttachments();
    }
    bubble.content.textContent = r.stopped ? 'Stopped before the first token.' : '';
  }
  if (failure) {
    bubble.error.textContent = describeError(failure);
    bubble.error.hidden = false;
  }
  const s = statsText(r);
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

function newChat() {
  stop();
  state.chat++;
  state.history = [];
  state.lastImage = null;
  for (const url of state.objectUrls) URL.revokeObjectURL(url);
  state.objectUrls = [];
  el.messages.replaceChildren(el.empty);
  el.empty.hidden = false;
  el.prompt.focus();
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
el.fileInput.addEventListener('change', () => { addFiles([...el.fileInput.files]); el.fileInput.value = ''; });
el.settingsToggle.addEventListener('click', () => {
  el.settings.hidden = !el.settings.hidden;
  el.settingsToggle.setAttribute('aria-expanded', String(!el.settings.hidden));
});
for (const input of [el.temperature, el.maxTokens, el.resolution, el.apiKey]) input.addEventListener('input', saveSettings);
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

// For tests and the curious: the renderer, and the page's state.
window.qvl = { renderMarkdown, escapeHtml, state, pollHealth, parseGrounding, renderGrounding };
