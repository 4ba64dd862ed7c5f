// The page's conversations, kept in this browser (IndexedDB; in memory only where the browser refuses
// storage): each one a list of turns, a user message (its text and the images, videos or PDF documents as
// sent: a document with the pages chosen and a few small page pictures) and the answer (its text, reasoning
// and timings). app.js draws them and sends them; this file stores them and shows
// the list to switch, rename and delete. Nothing here reaches the server.
'use strict';

const Conversations = (() => {
  const DB_NAME = 'qvl', STORE = 'conversations';
  let db = null;             // the IndexedDB database, or null (memory only)
  const memory = new Map();  // id -> conversation: every conversation, whether or not the database keeps them
  const removed = new Set(); // deleted ids: a late save (an answer that was still arriving) must not bring one back

  function open() {
    return new Promise((resolve) => {
      let req;
      try { req = indexedDB.open(DB_NAME, 1); } catch (e) { resolve(null); return; }
      req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: 'id' });
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => resolve(null);
      req.onblocked = () => resolve(null);
    });
  }

  function tx(mode, work) {
    return new Promise((resolve) => {
      if (!db) { resolve(null); return; }
      try {
        const t = db.transaction(STORE, mode);
        const result = work(t.objectStore(STORE));
        t.oncomplete = () => resolve(result && 'result' in result ? result.result : null);
        t.onerror = t.onabort = () => resolve(null);  // quota or a closed database: the memory copy stays
      } catch (e) { resolve(null); }
    });
  }

  // Loads every stored conversation; returns them, most recently used first.
  async function load() {
    db = await open();
    const all = (await tx('readonly', (s) => s.getAll())) || [];
    for (const c of all) if (c && typeof c.id === 'string' && Array.isArray(c.turns)) memory.set(c.id, c);
    return list();
  }

  function list() { return [...memory.values()].sort((a, b) => b.updated - a.updated); }
  function get(id) { return memory.get(id) || null; }

  function create() {
    const now = Date.now();
    return { id: now.toString(36) + Math.random().toString(36).slice(2, 8), title: '', named: false, created: now,
             updated: now, turns: [] };
  }

  // The title a conversation shows: its name, else the start of its first message (or what it attached).
  function titleOf(c) {
    if (c.named && c.title) return c.title;
    const first = c.turns.length ? c.turns[0].user.text : '';
    const part = c.turns.length ? c.turns[0].user.parts[0] : null;
    const attached = part ? (part.kind === 'document' ? part.name || 'Document' : 'Image') : 'New chat';
    const words = (first || attached).replace(/\s+/g, ' ').trim();
    return words.length > 48 ? words.slice(0, 47) + '…' : words;
  }

  async function save(c) {
    if (removed.has(c.id)) return;
    c.updated = Date.now();
    memory.set(c.id, c);
    await tx('readwrite', (s) => s.put(c));
  }

  async function remove(id) {
    removed.add(id);
    memory.delete(id);
    await tx('readwrite', (s) => s.delete(id));
  }

  async function rename(id, title) {
    const c = memory.get(id);
    if (!c) return;
    c.title = title.trim().slice(0, 200);
    c.named = c.title !== '';
    await save(c);
  }

  // The list in `ul`: each entry switches to its conversation, with Rename (edited in place) and Delete (asks
  // once more on the button itself). `current`: the id shown now; `on`: {open(id), deleted(id)}.
  function render(ul, current, on) {
    ul.replaceChildren(...list().filter((c) => c.turns.length || c.id === current).map((c) => {
      const li = document.createElement('li');
      li.className = 'chat-entry' + (c.id === current ? ' current' : '');
      li.dataset.id = c.id;
      const title = document.createElement('button');
      title.type = 'button';
      title.className = 'chat-title';
      title.textContent = titleOf(c);
      title.title = titleOf(c) + ' — ' + new Date(c.updated).toLocaleString();
      title.addEventListener('click', () => on.open(c.id));
      const renameButton = document.createElement('button');
      renameButton.type = 'button';
      renameButton.className = 'chat-rename';
      renameButton.textContent = 'Rename';
      renameButton.title = 'Rename this conversation';
      renameButton.addEventListener('click', () => {
        const input = document.createElement('input');
        input.className = 'chat-name';
        input.value = titleOf(c);
        input.maxLength = 200;
        input.setAttribute('aria-label', 'Conversation name');
        let done = false;
        const finish = async (keep) => {
          if (done) return;
          done = true;
          if (keep) await rename(c.id, input.value);
          render(ul, current, on);
        };
        input.addEventListener('keydown', (e) => {
          if (e.key === 'Enter') { e.preventDefault(); finish(true); }
          if (e.key === 'Escape') finish(false);
        });
        input.addEventListener('blur', () => finish(true));
        title.replaceWith(input);
        input.focus();
        input.select();
      });
      const del = document.createElement('button');
      del.type = 'button';
      del.className = 'chat-delete';
      del.textContent = 'Delete';
      del.title = 'Delete this conversation from this browser';
      del.addEventListener('click', async () => {
        if (del.dataset.armed !== '1') {  // the first click asks; the second, within 4 s, deletes
          del.dataset.armed = '1';
          del.textContent = 'Delete?';
          setTimeout(() => { del.dataset.armed = ''; del.textContent = 'Delete'; }, 4000);
          return;
        }
        await remove(c.id);
        on.deleted(c.id);
      });
      li.append(title, renameButton, del);
      return li;
    }));
  }

  return { load, list, get, create, save, remove, rename, titleOf, render };
})();
