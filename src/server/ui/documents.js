// PDF documents on the chat page: recognised by their bytes, previewed by the server (POST
// /v1/documents/pages: the page count and a small picture of each of the first 100 pages), shown in the
// attachment tray as a chip whose page pictures choose the pages sent, and sent as an OpenAI `file` content
// part naming those pages. app.js attaches, sends and draws the conversation; this file knows documents.
'use strict';

const Documents = (() => {
  const MAX_FILE = 14 << 20;     // the largest PDF attached: its base64 (4/3 larger) fits the default --max-body of 20 MB
  const THUMBNAIL_SIZE = 160;    // a page picture's longest side in pixels: shown at 4rem, sharp on a HiDPI screen
  const CHOSEN_AT_FIRST = 3;     // pages chosen when a document is attached: about what the default context holds
                                 // at the default resolution (1 MP, ~1,000 tokens a page); the server says how many fit
  const BUBBLE_THUMBS = 4;       // page pictures kept with a sent document: stored with the conversation, so few

  // "%PDF-" within the first 1024 bytes: where PDF readers look for it (some files have bytes before it).
  function isPdf(b) {
    const sig = [0x25, 0x50, 0x44, 0x46, 0x2d];
    for (let i = 0; i + sig.length <= Math.min(b.length, 1024); i++) {
      if (sig.every((x, k) => b[i + k] === x)) return true;
    }
    return false;
  }

  // A tray attachment for `file`, shown as reading its pages until load() fills it in.
  function attachment(file) {
    return { file, kind: 'document', name: file.name || 'document.pdf', thumb: null, poster: null, loading: true,
             dataUrl: '', pageCount: 0, thumbnails: [], truncated: false, selected: new Set() };
  }

  function readAsDataUrl(blob) {
    return new Promise((resolve, reject) => {
      const r = new FileReader();
      r.onload = () => resolve(r.result);
      r.onerror = () => reject(new Error('the file cannot be read'));
      r.readAsDataURL(blob);
    });
  }

  // Reads the file (kept as the data: URI that is sent) and asks the server for its pages; an Error carries
  // the server's own words (encrypted, damaged, a server without the PDF renderer). `headers`: the API key.
  async function load(att, headers) {
    const read = await readAsDataUrl(att.file);
    att.dataUrl = read.replace(/^data:[^,]*,/, 'data:application/pdf;base64,');  // the bytes decide, not the name
    let res;
    try {
      res = await fetch('/v1/documents/pages', { method: 'POST', headers,
        body: JSON.stringify({ file_data: att.dataUrl, thumbnail_size: THUMBNAIL_SIZE }) });
    } catch (e) {
      throw new Error('the server cannot be reached (' + e.message + ')');
    }
    const j = await res.json().catch(() => null);
    if (!res.ok || !j || !Number.isInteger(j.pages) || j.pages < 1) {
      const said = j && j.error && (typeof j.error === 'string' ? j.error : j.error.message);
      throw new Error(said || 'the server answered HTTP ' + res.status);
    }
    att.pageCount = j.pages;
    // Only data: pictures go into an <img> (the page's CSP would refuse anything else anyway).
    att.thumbnails = (Array.isArray(j.thumbnails) ? j.thumbnails : []).filter((t) =>
      t && Number.isInteger(t.page) && typeof t.url === 'string' && t.url.startsWith('data:image/'));
    att.truncated = Boolean(j.thumbnails_truncated);
    for (let p = 1; p <= Math.min(j.pages, CHOSEN_AT_FIRST); p++) att.selected.add(p);
    att.loading = false;
  }

  function span(className, text) {
    const s = document.createElement('span');
    s.className = className;
    s.textContent = text;
    return s;
  }

  function button(className, text, title, onClick) {
    const b = document.createElement('button');
    b.type = 'button';  // inside the composer's form: never a submit
    b.className = className;
    b.textContent = text;
    b.title = title;
    b.addEventListener('click', onClick);
    return b;
  }

  // The tray's chip: the name, how many pages go, All and None, and a strip of page pictures that each
  // toggle their page. A toggle redraws only this chip's marks, not the tray.
  function chip(att) {
    const box = document.createElement('div');
    box.className = 'thumb document';
    box.dataset.state = att.loading ? 'loading' : 'ready';
    const head = document.createElement('div');
    head.className = 'doc-head';
    const count = span('doc-count', '');
    head.append(span('doc-name', att.name), count);
    const strip = document.createElement('div');
    strip.className = 'doc-pages';
    box.append(head, strip);
    if (att.loading) {
      box.title = att.name + ': the server is reading its pages';
      strip.append(span('waiting', 'Reading the pages'));
      return box;
    }
    const update = () => {
      count.textContent = att.selected.size + ' of ' + att.pageCount + (att.pageCount === 1 ? ' page' : ' pages');
      for (const b of strip.querySelectorAll('.page')) {
        const on = att.selected.has(Number(b.dataset.page));
        b.setAttribute('aria-pressed', String(on));
        b.title = 'Page ' + b.dataset.page + (on ? ': sent (click to leave it out)' : ': left out (click to send it)');
      }
    };
    head.append(
      button('doc-all', 'All', 'Send every page', () => {
        for (let p = 1; p <= att.pageCount; p++) att.selected.add(p);
        update();
      }),
      button('doc-none', 'None', 'Leave every page out (then choose some)', () => { att.selected.clear(); update(); }));
    for (const t of att.thumbnails) {
      const b = button('page', '', '', () => {
        if (!att.selected.delete(t.page)) att.selected.add(t.page);
        update();
      });
      b.dataset.page = t.page;
      const img = document.createElement('img');
      img.src = t.url;
      img.alt = 'Page ' + t.page;
      b.append(img, span('page-number', String(t.page)));
      strip.append(b);
    }
    if (att.truncated) {  // the server pictures the first 100 pages; All and None reach the rest
      strip.append(span('doc-more', '+' + (att.pageCount - att.thumbnails.length) + ' more (All / None)'));
    }
    box.title = att.name + ', ' + att.pageCount + (att.pageCount === 1 ? ' page' : ' pages');
    update();
    return box;
  }

  // Why the tray's documents cannot be sent yet ('' when they can).
  function unready(list) {
    for (const a of list) {
      if (a.kind !== 'document') continue;
      if (a.loading) return a.name + ' is still being read; send when its pages show.';
      if (!a.selected.size) return 'No page of ' + a.name + ' is chosen: click the pages to send (or All), or remove it.';
    }
    return '';
  }

  // What a turn keeps of a document besides its file (so what the stored conversation holds and a resend
  // sends again): the pages chosen, the page count, and a few of the chosen pages' pictures for its bubble.
  // `a`: a tray attachment (its selection now) or a part already sent (as it was).
  // maxPixels: the page's image resolution setting, which bounds each page as it bounds a picture (0: the
  // server's); a part sent before keeps its own.
  function fieldsOf(a, maxPixels) {
    if (a.kind !== 'document') return {};
    if (!a.selected) return { pages: a.pages, pageCount: a.pageCount, thumbs: a.thumbs || [], maxPixels: a.maxPixels || 0 };
    return {
      pages: [...a.selected].sort((x, y) => x - y),
      maxPixels: maxPixels || 0,
      pageCount: a.pageCount,
      thumbs: a.thumbnails.filter((t) => a.selected.has(t.page)).slice(0, BUBBLE_THUMBS)
        .map((t) => ({ page: t.page, url: t.url })),
    };
  }

  // Sorted page numbers as runs of consecutive pages: [1, 2, 3, 7] -> [[1, 3], [7, 7]].
  function runsOf(pages) {
    const runs = [];
    for (const p of pages) {
      const last = runs[runs.length - 1];
      if (last && p === last[1] + 1) last[1] = p; else runs.push([p, p]);
    }
    return runs;
  }

  // The OpenAI content part: the server renders each chosen page as an image ("Page n: " before it). The
  // pages go as a list; a very long one (All on a thick document) as the shorter selection string "1-300".
  function contentPart(p) {
    const file = { filename: p.name, file_data: p.url };
    if (Array.isArray(p.pages)) {  // none kept: every page (the API's default)
      file.pages = p.pages.length <= 1000 ? p.pages
        : runsOf(p.pages).map(([a, b]) => (a === b ? String(a) : a + '-' + b)).join(',');
    }
    const part = { type: 'file', file };
    if (p.maxPixels) part.max_pixels = p.maxPixels;
    return part;
  }

  // "pages 1, 3", "pages 2–5, 9", "page 4", "all 3 pages".
  function pagesText(pages, count) {
    if (!Array.isArray(pages)) return 'all pages';
    if (count > 1 && pages.length === count) return 'all ' + count + ' pages';
    const text = runsOf(pages).map(([a, b]) => (a === b ? String(a) : b === a + 1 ? a + ', ' + b : a + '–' + b)).join(', ');
    return (pages.length === 1 ? 'page ' : 'pages ') + text;
  }

  // A sent document in its message: a few of the chosen pages' pictures, its name and which pages went.
  function bubble(a) {
    const f = fieldsOf(a);
    const fig = document.createElement('figure');
    fig.className = 'document';
    fig.title = a.name;
    if (f.thumbs.length) {
      const strip = document.createElement('div');
      strip.className = 'doc-pages';
      for (const t of f.thumbs) {
        const img = document.createElement('img');
        img.src = t.url;
        img.alt = img.title = 'Page ' + t.page;
        strip.append(img);
      }
      fig.append(strip);
    }
    const caption = document.createElement('figcaption');
    caption.append(span('doc-name', a.name), span('doc-which', pagesText(f.pages, f.pageCount)));
    fig.append(caption);
    return fig;
  }

  return { MAX_FILE, isPdf, attachment, load, chip, unready, fieldsOf, contentPart, bubble, pagesText };
})();
