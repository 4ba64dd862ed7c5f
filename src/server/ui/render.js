// How an answer is shown: a small Markdown renderer that escapes all HTML before it adds any formatting of its
// own, and the boxes and points of a grounding answer drawn over the image they refer to. No state, no
// requests: app.js calls these.
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

