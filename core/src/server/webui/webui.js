// The chat page of `loom serve`: talks to this server's own API
// (/v1/chat/completions streamed as server-sent events, /v1/models, /health)
// and puts model output on the page as text nodes only, never as HTML.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const KEY_STORE = 'loom.apiKey'; // sessionStorage: gone with the tab
  const SETTINGS_STORE = 'loom.settings'; // localStorage
  const DEFAULTS = {
    system: '', temperature: '0.7', top_p: '0.95', max_tokens: '1024',
    seed: '',
  };
  const NARROW = window.matchMedia('(max-width: 820px)');

  const ui = {
    log: $('log'), empty: $('empty'), composer: $('composer'),
    prompt: $('prompt'), send: $('send'), stop: $('stop'),
    model: $('model'), device: $('device'), health: $('health'),
    newChat: $('new-chat'), toggle: $('toggle-settings'),
    settings: $('settings'), closeSettings: $('close-settings'),
    system: $('system'), temperature: $('temperature'), topP: $('top-p'),
    maxTokens: $('max-tokens'), seed: $('seed'),
    settingsError: $('settings-error'), key: $('api-key'),
    saveKey: $('save-key'), forgetKey: $('forget-key'),
    keyNote: $('key-note'), reset: $('reset-settings'),
  };

  // turns: {role, content, el, text (the Text node), failed}
  const state = { turns: [], busy: null, model: null, keyRefused: false };

  function node(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // ------------------------------------------------------------ storage

  function store(kind) {
    try {
      return kind === 'session' ? window.sessionStorage : window.localStorage;
    } catch (e) {
      return null; // storage disabled: settings live for this page only
    }
  }

  function apiKey() {
    const s = store('session');
    return (s && s.getItem(KEY_STORE)) || '';
  }

  function setApiKey(k) {
    const s = store('session');
    if (!s) return;
    if (k) s.setItem(KEY_STORE, k);
    else s.removeItem(KEY_STORE);
  }

  function headers(json) {
    const h = {};
    if (json) h['Content-Type'] = 'application/json';
    const k = apiKey();
    if (k) h.Authorization = 'Bearer ' + k;
    return h;
  }

  const FIELDS = [
    ['system', 'system'], ['temperature', 'temperature'], ['top_p', 'topP'],
    ['max_tokens', 'maxTokens'], ['seed', 'seed'],
  ];

  function loadSettings() {
    let saved = {};
    const s = store('local');
    try {
      saved = JSON.parse((s && s.getItem(SETTINGS_STORE)) || '{}') || {};
    } catch (e) {
      saved = {};
    }
    for (const [name, id] of FIELDS)
      ui[id].value = typeof saved[name] === 'string' ? saved[name] : DEFAULTS[name];
  }

  function saveSettings() {
    const s = store('local');
    if (!s) return;
    const o = {};
    for (const [name, id] of FIELDS) o[name] = ui[id].value;
    try {
      s.setItem(SETTINGS_STORE, JSON.stringify(o));
    } catch (e) {
      // full or refused: the fields still hold the values
    }
  }

  // The request's sampling fields from the settings, or {error}.
  function sampling() {
    const out = {};
    const num = (v) => (v.trim() === '' ? null : Number(v));
    const t = num(ui.temperature.value);
    if (t !== null) {
      if (!(t >= 0 && t <= 2)) return { error: 'Temperature must be between 0 and 2.' };
      out.temperature = t;
    }
    const p = num(ui.topP.value);
    if (p !== null) {
      if (!(p > 0 && p <= 1)) return { error: 'Top-p must be above 0 and at most 1.' };
      out.top_p = p;
    }
    const m = num(ui.maxTokens.value);
    if (m !== null) {
      if (!(Number.isInteger(m) && m >= 1)) return { error: 'Max tokens must be a whole number, 1 or more.' };
      out.max_tokens = m;
    }
    const s = ui.seed.value.trim();
    if (s !== '') {
      // JSON numbers past 2^53 lose digits in JavaScript
      if (!/^\d+$/.test(s) || !Number.isSafeInteger(Number(s)))
        return { error: 'Seed must be a whole number from 0 to 9007199254740991, or empty for random.' };
      out.seed = Number(s);
    }
    return out;
  }

  // ------------------------------------------------------------ settings panel

  function settingsShown() {
    return NARROW.matches ? ui.settings.classList.contains('open')
      : !ui.settings.classList.contains('hidden-wide');
  }

  function showSettings(show) {
    if (NARROW.matches) ui.settings.classList.toggle('open', show);
    else ui.settings.classList.toggle('hidden-wide', !show);
    document.body.classList.toggle('drawer-open', NARROW.matches && show);
    ui.toggle.setAttribute('aria-expanded', String(show));
  }

  function keyNote(text, kind) {
    ui.keyNote.textContent = text;
    ui.keyNote.className = 'note' + (kind ? ' ' + kind : '');
  }

  function useKey() {
    const k = ui.key.value.trim();
    // a header value must be visible ASCII; anything else is a typo
    if (k && !/^[\x21-\x7e]+$/.test(k)) {
      keyNote('A key is printable ASCII without spaces.', 'bad');
      return;
    }
    setApiKey(k);
    state.keyRefused = false;
    keyNote(k ? 'Checking the key…' : 'No key set.', '');
    loadModel();
  }

  // ------------------------------------------------------------ server facts

  function showModel(text, known) {
    ui.model.textContent = text;
    ui.model.title = known ? 'model served' : text;
  }

  let modelTimer = null;
  async function loadModel() {
    clearTimeout(modelTimer);
    let r;
    try {
      r = await fetch('v1/models', { headers: headers(false), cache: 'no-store' });
    } catch (e) {
      showModel('server unreachable');
      modelTimer = setTimeout(loadModel, 5000);
      return;
    }
    if (r.status === 401) {
      state.model = null;
      state.keyRefused = true;
      showModel('API key needed');
      if (apiKey()) keyNote('The server refused this key (401).', 'bad');
      else keyNote('This server needs an API key: enter it here.', 'bad');
      return;
    }
    if (!r.ok) {
      showModel('model unavailable (' + r.status + ')');
      modelTimer = setTimeout(loadModel, r.status === 503 ? 2000 : 10000);
      return;
    }
    try {
      const j = await r.json();
      state.model = j.data && j.data[0] && typeof j.data[0].id === 'string' ? j.data[0].id : null;
    } catch (e) {
      state.model = null;
    }
    showModel(state.model || 'unnamed model', !!state.model);
    if (state.model) document.title = state.model + ' · loom chat';
    if (apiKey()) keyNote('Key accepted; kept in this tab only.', 'good');
    else keyNote("Kept in this tab's session storage only.", '');
  }

  async function pollHealth() {
    let status = 'down', label = 'offline', device = null;
    try {
      const r = await fetch('health', { cache: 'no-store' });
      const j = await r.json().catch(() => ({}));
      device = typeof j.device === 'string' ? j.device : null;
      if (r.ok && j.status === 'ok') { status = 'ok'; label = 'ready'; }
      else if (j.status === 'loading') { status = 'loading'; label = 'loading model'; }
      else if (j.status === 'stopping') { status = 'down'; label = 'stopping'; }
      else label = 'status ' + r.status;
    } catch (e) {
      // unreachable: shown as offline
    }
    ui.health.dataset.state = status;
    ui.health.textContent = label;
    ui.device.hidden = !device;
    if (device) ui.device.textContent = device.toUpperCase();
    if (status === 'ok' && !state.model && !state.keyRefused) loadModel();
    setTimeout(pollHealth, status === 'ok' ? 10000 : 2000);
  }

  // ------------------------------------------------------------ turns

  function nearBottom() {
    const l = ui.log;
    return l.scrollHeight - l.scrollTop - l.clientHeight < 48;
  }

  function toBottom() {
    ui.log.scrollTop = ui.log.scrollHeight;
  }

  async function copyText(text, button) {
    let ok = false;
    try {
      if (navigator.clipboard && window.isSecureContext) {
        await navigator.clipboard.writeText(text);
        ok = true;
      }
    } catch (e) {
      ok = false;
    }
    if (!ok) {
      // plain http on another host has no clipboard API
      const ta = node('textarea', 'offscreen');
      ta.value = text;
      ta.setAttribute('readonly', '');
      document.body.appendChild(ta);
      ta.select();
      try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
      ta.remove();
    }
    button.textContent = ok ? 'Copied' : 'Copy failed';
    setTimeout(() => { button.textContent = 'Copy'; }, 1500);
  }

  function addTurn(role, content) {
    const turn = { role, content, failed: false };
    const el = node('div', 'turn ' + role);
    const head = node('div', 'head');
    head.appendChild(node('span', 'who', role === 'user' ? 'You' : (state.model || 'Assistant')));
    const copy = node('button', 'copy', 'Copy');
    copy.type = 'button';
    copy.title = 'Copy this message';
    copy.addEventListener('click', () => copyText(turn.content, copy));
    head.appendChild(copy);
    const body = node('div', 'body');
    const text = node('div', 'text');
    turn.text = document.createTextNode(content);
    text.appendChild(turn.text);
    body.appendChild(text);
    el.append(head, body);
    turn.el = el;
    turn.body = body;
    const follow = nearBottom();
    ui.empty.hidden = true;
    ui.log.appendChild(el);
    if (follow || role === 'user') toBottom();
    state.turns.push(turn);
    return turn;
  }

  function appendText(turn, piece) {
    const follow = nearBottom();
    turn.content += piece;
    turn.text.appendData(piece);
    if (follow) toBottom();
  }

  function appendReasoning(turn, piece) {
    if (!turn.reasoning) {
      // folded under the reply; the reader opens it when curious
      const d = node('details', 'reasoning');
      d.appendChild(node('summary', null, 'Reasoning'));
      const t = node('div', 'text reasoning-text');
      turn.reasoning = document.createTextNode('');
      t.appendChild(turn.reasoning);
      d.appendChild(t);
      turn.body.appendChild(d);
    }
    const follow = nearBottom();
    turn.reasoning.appendData(piece);
    if (follow) toBottom();
  }

  function fmtTime(ms) {
    return ms < 1000 ? Math.round(ms) + ' ms' : (ms / 1000).toFixed(2) + ' s';
  }

  // tokens, tok/s, time to first token, from the usage chunk and the clock
  function figures(turn, f) {
    const line = node('div', 'figures');
    const parts = [];
    const u = f.usage;
    if (u && typeof u.completion_tokens === 'number') {
      parts.push(u.completion_tokens + (u.completion_tokens === 1 ? ' token' : ' tokens'));
      const gen = (f.tEnd - f.tFirst) / 1000;
      // the first token's time is in the TTFT; the rate is of the rest
      if (f.tFirst !== null && u.completion_tokens > 1 && gen > 0)
        parts.push(((u.completion_tokens - 1) / gen).toFixed(1) + ' tok/s');
    }
    if (f.tFirst !== null) parts.push('first token ' + fmtTime(f.tFirst - f.t0));
    if (u && typeof u.prompt_tokens === 'number') parts.push('prompt ' + u.prompt_tokens);
    parts.push('total ' + fmtTime(f.tEnd - f.t0));
    line.appendChild(document.createTextNode(parts.join(' · ')));
    const note = f.stopped ? 'stopped' : f.finish === 'length' ? 'reached max tokens' : null;
    if (note) {
      line.appendChild(document.createTextNode(' · '));
      line.appendChild(node('span', 'warn', note));
    }
    const follow = nearBottom();
    turn.el.appendChild(line);
    if (follow) toBottom();
  }

  // A message for an HTTP error, by status, with the server's own words.
  function httpMessage(status, msg) {
    const said = msg ? ' The server said: ' + msg : '';
    switch (status) {
      case 401:
        return apiKey() ? 'The server refused the API key (401). Check the key under Settings.'
          : 'This server needs an API key (401). Enter it under Settings.';
      case 429:
        return 'The server is busy (429): too many requests are waiting. Try again in a moment.' + said;
      case 503:
        return 'The server is not ready (503).' + said;
      case 400:
        return 'The server could not take this request (400).' + said;
      case 413:
        return 'The conversation is too large for the server (413).' + said;
      default:
        return 'The request failed (' + status + ').' + said;
    }
  }

  function showError(reply, userTurn, message) {
    reply.failed = true;
    userTurn.failed = true;
    const box = node('div', 'error');
    box.setAttribute('role', 'alert');
    box.appendChild(node('span', null, message));
    const retry = node('button', 'retry', 'Retry');
    retry.type = 'button';
    retry.addEventListener('click', () => {
      const last = state.turns[state.turns.length - 1];
      if (state.busy || last !== reply) return;
      state.turns.pop();
      reply.el.remove();
      userTurn.failed = false;
      generate(userTurn);
    });
    box.appendChild(retry);
    reply.body.appendChild(box);
    if (nearBottom()) toBottom();
  }

  function setBusy(busy) {
    ui.send.hidden = busy;
    ui.stop.hidden = !busy;
    if (!busy) ui.prompt.focus();
  }

  function messages(exclude) {
    const out = [];
    const sys = ui.system.value.trim();
    if (sys) out.push({ role: 'system', content: sys });
    for (const t of state.turns) {
      if (t === exclude || t.failed) continue;
      if (t.role === 'assistant' && t.content === '') continue;
      out.push({ role: t.role, content: t.content });
    }
    return out;
  }

  // Splits server-sent events off the front of buf: [events' data, rest].
  function takeEvents(buf) {
    const events = [];
    for (;;) {
      const m = /\r?\n\r?\n/.exec(buf);
      if (!m) break;
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) events.push(data);
    }
    return [events, buf];
  }

  async function generate(userTurn) {
    const reply = addTurn('assistant', '');
    reply.el.classList.add('streaming');
    const body = Object.assign({
      messages: messages(reply), stream: true,
      stream_options: { include_usage: true },
    }, state.sampling);
    if (state.model) body.model = state.model;
    const controller = new AbortController();
    state.busy = { controller, reply };
    setBusy(true);
    const f = { t0: performance.now(), tFirst: null, tEnd: 0, usage: null, finish: null, stopped: false };
    let failure = null;
    try {
      const r = await fetch('v1/chat/completions', {
        method: 'POST', headers: headers(true), body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!r.ok) {
        let msg = '';
        try {
          const j = await r.json();
          msg = j && j.error && typeof j.error.message === 'string' ? j.error.message : '';
        } catch (e) {
          msg = '';
        }
        if (r.status === 401) {
          state.keyRefused = true;
          keyNote(apiKey() ? 'The server refused this key (401).' : 'This server needs an API key: enter it here.', 'bad');
          showSettings(true);
          ui.key.focus();
        }
        failure = httpMessage(r.status, msg);
      } else {
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        let done = false;
        while (!done && !failure) {
          const chunk = await reader.read();
          if (chunk.done) break;
          let events;
          [events, buf] = takeEvents(buf + dec.decode(chunk.value, { stream: true }));
          for (const data of events) {
            if (data === '[DONE]') { done = true; break; }
            let o;
            try { o = JSON.parse(data); } catch (e) { continue; }
            if (o.error) {
              failure = 'The server stopped with an error: ' +
                (typeof o.error.message === 'string' ? o.error.message : 'unknown');
              break;
            }
            if (o.usage) f.usage = o.usage;
            for (const ch of o.choices || []) {
              const d = ch.delta || {};
              const think = typeof d.reasoning_content === 'string' ? d.reasoning_content
                : typeof d.reasoning === 'string' ? d.reasoning : '';
              const piece = typeof d.content === 'string' ? d.content : '';
              if ((think || piece) && f.tFirst === null) f.tFirst = performance.now();
              if (think) appendReasoning(reply, think);
              if (piece) appendText(reply, piece);
              if (ch.finish_reason) f.finish = ch.finish_reason;
            }
          }
        }
        if (!done && !failure) failure = 'The reply ended before the server finished it.';
        if (failure) controller.abort();
      }
    } catch (e) {
      if (e && e.name === 'AbortError') f.stopped = true;
      else failure = 'Could not reach the server: ' + (e && e.message ? e.message : e);
    }
    f.tEnd = performance.now();
    reply.el.classList.remove('streaming');
    reply.el.classList.toggle('empty-reply', reply.content === '');
    if (failure) showError(reply, userTurn, failure);
    else figures(reply, f);
    state.busy = null;
    setBusy(false);
  }

  function stop() {
    if (state.busy) state.busy.controller.abort();
  }

  function send() {
    const text = ui.prompt.value;
    if (!text.trim() || state.busy) return;
    const s = sampling();
    if (s.error) {
      ui.settingsError.textContent = s.error;
      ui.settingsError.hidden = false;
      showSettings(true);
      return;
    }
    ui.settingsError.hidden = true;
    state.sampling = s;
    ui.prompt.value = '';
    fitPrompt();
    const user = addTurn('user', text);
    generate(user);
  }

  function newChat() {
    stop();
    for (const t of state.turns) t.el.remove();
    state.turns = [];
    ui.empty.hidden = false;
    ui.prompt.focus();
  }

  function fitPrompt() {
    const p = ui.prompt;
    p.style.height = 'auto';
    p.style.height = Math.min(p.scrollHeight + 2, 192) + 'px';
  }

  // ------------------------------------------------------------ wiring

  ui.composer.addEventListener('submit', (e) => { e.preventDefault(); send(); });
  ui.prompt.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      send();
    }
  });
  ui.prompt.addEventListener('input', fitPrompt);
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') {
      if (state.busy) stop();
      else if (NARROW.matches && settingsShown()) showSettings(false);
    }
  });
  ui.stop.addEventListener('click', stop);
  ui.newChat.addEventListener('click', newChat);
  ui.toggle.addEventListener('click', () => showSettings(!settingsShown()));
  ui.closeSettings.addEventListener('click', () => showSettings(false));
  // on a narrow window a tap beside the drawer closes it
  document.querySelector('.chat').addEventListener('pointerdown', () => {
    if (NARROW.matches && settingsShown()) showSettings(false);
  });
  for (const [, id] of FIELDS) ui[id].addEventListener('input', saveSettings);
  ui.reset.addEventListener('click', () => {
    for (const [name, id] of FIELDS) ui[id].value = DEFAULTS[name];
    saveSettings();
  });
  ui.saveKey.addEventListener('click', useKey);
  ui.key.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); useKey(); }
  });
  ui.forgetKey.addEventListener('click', () => {
    ui.key.value = '';
    useKey();
  });
  NARROW.addEventListener('change', () => {
    ui.settings.classList.remove('open');
    document.body.classList.remove('drawer-open');
    ui.toggle.setAttribute('aria-expanded', String(settingsShown()));
  });

  loadSettings();
  ui.key.value = apiKey();
  ui.toggle.setAttribute('aria-expanded', String(settingsShown()));
  pollHealth();
  ui.prompt.focus();
}());
