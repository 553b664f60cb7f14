// The live web view of a mur capsule (and, under `mur serve`, its list of capsules).
// It speaks the capsule's own JSON-RPC on `POST` to the page's path, as any client
// does: `stream/watch` for the frames, `message/stream` to send a task or answer an
// input-required wait, `tasks/cancel` to cancel. All text from the capsule is put in
// with textContent, never parsed as HTML.
'use strict';

(() => {
  const view = document.body.dataset.view;
  const address = location.pathname;
  const byId = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  // --- Tokens: kept for this tab only (sessionStorage), sent as a Bearer token. ---

  const tokenKey = view === 'fleet' ? 'mur.admin-token' : 'mur.token:' + address;
  const token = () => sessionStorage.getItem(tokenKey) || '';
  let onToken = () => {};

  function auth(headers) {
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    return headers;
  }

  function askToken(hint, then) {
    const refused = token() !== '';
    sessionStorage.removeItem(tokenKey);
    onToken = then;
    byId('token-label').textContent = view === 'fleet' ? 'Admin token' : 'Capsule token';
    byId('token-hint').textContent = refused ? 'That token was refused. ' + hint : hint;
    byId('token-box').hidden = false;
    byId('token-input').focus();
  }

  byId('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const input = byId('token-input');
    const value = input.value.trim();
    if (!value) return;
    sessionStorage.setItem(tokenKey, value);
    input.value = '';
    byId('token-box').hidden = true;
    onToken();
  });

  function setConn(state, text) {
    const conn = byId('conn');
    conn.dataset.state = state;
    conn.textContent = text;
  }

  // --- Server-sent events read off a fetch body. ---

  // Calls `onFrame({id, event, data})` for each frame; comment lines (the heartbeat)
  // and blocks without data are skipped, as the protocol asks.
  function sseParser(onFrame) {
    let buffer = '';
    const block = (text) => {
      let id = null;
      let event = 'message';
      const data = [];
      for (const raw of text.split('\n')) {
        const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
        if (line === '' || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'id') id = value;
        else if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
      }
      if (data.length) onFrame({ id, event, data: data.join('\n') });
    };
    return (chunk) => {
      buffer += chunk;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const text = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        block(text);
      }
    };
  }

  let lastHeard = 0;

  // Reads `response`'s event stream to its end; `onFrame` returning false stops early.
  async function readFrames(response, onFrame) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let going = true;
    const push = sseParser((frame) => {
      if (going && onFrame(frame) === false) going = false;
    });
    while (going) {
      const { value, done } = await reader.read();
      if (done) break;
      lastHeard = Date.now();
      push(decoder.decode(value, { stream: true }));
    }
    if (!going) reader.cancel().catch(() => {});
  }

  function parse(data) {
    try {
      return JSON.parse(data);
    } catch {
      return null;
    }
  }

  let rpcId = 0;
  const call = (method, params) => JSON.stringify({ jsonrpc: '2.0', id: ++rpcId, method, params });

  function post(body, extra, signal) {
    return fetch(address, {
      method: 'POST',
      headers: auth({ 'Content-Type': 'application/json', ...extra }),
      body,
      signal,
      cache: 'no-store',
    });
  }

  // ====================================================================
  // The capsule view.
  // ====================================================================

  const tasks = new Map();
  // How many times each frame has been shown, keyed by its contents: a replay repeats
  // frames already shown, and ids alone are labels, not unique (the protocol).
  const shown = new Map();
  let watching = null;
  let retries = 0;
  let connections = 0;

  function frameKey(frame) {
    return frame.event + '\u0000' + frame.id + '\u0000' + frame.data;
  }

  // Watches the capsule until the stream ends, then reconnects. Every connection asks
  // for the whole replay buffer (`Last-Event-ID: 0`): ids repeat across tasks, so a
  // replay from the last id seen could skip a later task's frames; the frames already
  // shown are dropped by their contents instead.
  async function watch() {
    const controller = new AbortController();
    watching = controller;
    const seenHere = new Map();
    let closed = false;
    setConn('waiting', retries ? 'reconnecting…' : 'connecting…');
    try {
      const response = await post(call('stream/watch', {}), { 'Last-Event-ID': '0' }, controller.signal);
      if (response.status === 401) {
        setConn('down', 'needs a token');
        askToken('This capsule is behind a token: paste the one its owner was given (for a capsule mur run started, mur token SESSION prints it).', reconnect);
        return;
      }
      const type = response.headers.get('content-type') || '';
      if (!response.ok || !type.startsWith('text/event-stream')) {
        throw new Error('the capsule answered HTTP ' + response.status);
      }
      await readFrames(response, (frame) => {
        if (frame.event === 'capsule-closed') closed = true;
        onWatchFrame(frame, seenHere);
      });
    } catch (error) {
      if (watching !== controller) return;
    }
    if (watching !== controller) return;
    watching = null;
    // A lost connection: the capsule may have exited or may still run; only a new
    // connection tells. Back off, up to 15 s between tries. A closed capsule is
    // looked for again at the longest interval (under mur serve it may be started
    // again at the same address).
    retries = closed ? 6 : retries + 1;
    const wait = Math.min(30, 2 ** (retries - 1)) * 500;
    const said = closed ? 'capsule closed; looking again in ' : 'connection lost; retrying in ';
    setConn('down', said + Math.ceil(wait / 1000) + ' s');
    setTimeout(() => {
      if (!watching) watch();
    }, wait);
  }

  function reconnect() {
    if (watching) watching.abort();
    watching = null;
    retries = 0;
    watch();
  }

  function onWatchFrame(frame, seenHere) {
    switch (frame.event) {
      case 'connection-ack': {
        const ack = parse(frame.data) || {};
        retries = 0;
        connections += 1;
        setConn('live', 'live' + (ack.conversation_mode ? ' · ' + ack.conversation_mode : ''));
        return;
      }
      case 'gap': {
        const gap = parse(frame.data) || {};
        notice('Earlier frames may be gone: the capsule keeps only its most recent ones (the oldest it has is id ' + gap.first_available_id + ').');
        return;
      }
      case 'capsule-closed':
        return;
      case 'status':
      case 'artifact':
      case 'text':
      case 'thinking': {
        const key = frameKey(frame);
        const count = (seenHere.get(key) || 0) + 1;
        seenHere.set(key, count);
        if (count <= (shown.get(key) || 0)) return;
        shown.set(key, count);
        const data = parse(frame.data);
        if (!data || typeof data.id !== 'string') return;
        // A replay never carries a task's frame 0, its first `working` status; a task
        // first met past it gets its start from the A2A door's lossless cursor.
        const met = !tasks.has(data.id);
        apply(frame.event, data);
        if (met && frame.id !== '0') recoverStart(tasks.get(data.id));
        return;
      }
      default:
        // An event type this page does not know: ignored, as the protocol asks.
    }
  }

  // The task's first status from `SubscribeToTask` replayed from its first event
  // (`Last-Event-ID: 0`): shown at the head of its timeline, as the live frame would
  // have been. What the door no longer keeps is said instead of left out silently.
  async function recoverStart(task) {
    const controller = new AbortController();
    const headers = { 'A2A-Version': '1.0', 'Last-Event-ID': '0' };
    let first = null;
    try {
      const response = await post(call('SubscribeToTask', { id: task.id }), headers, controller.signal);
      const type = response.headers.get('content-type') || '';
      if (response.ok && type.startsWith('text/event-stream')) {
        await readFrames(response, (frame) => {
          const event = parse(frame.data);
          const update = event && event.result && event.result.statusUpdate;
          if (!update || !update.status || update.status.state !== 'TASK_STATE_WORKING') return true;
          first = update.status;
          return false;
        });
      }
    } catch {
      first = null;
    } finally {
      controller.abort();
    }
    const head = el('li', 'status');
    if (first && first.state === 'TASK_STATE_WORKING') {
      const message = messageText(first.message);
      const turn = /^inference turn (\d+)$/.exec(message);
      head.append(el('div', 'meta', turn ? 'turn ' + turn[1] : message));
    } else {
      head.append(el('div', 'meta', 'the start of this task is no longer kept'));
    }
    task.timeline.prepend(head);
  }

  function messageText(message) {
    const parts = (message && message.parts) || [];
    return parts.map((p) => (typeof p.text === 'string' ? p.text : '')).join('');
  }

  function notice(text) {
    const box = byId('notice');
    box.textContent = text;
    box.hidden = false;
  }

  function taskOf(id) {
    let task = tasks.get(id);
    if (task) return task;
    const item = el('li', 'task');
    item.dataset.task = id;
    const head = el('header');
    const title = el('h2', null, id);
    const badge = el('span', 'badge', 'seen');
    const cancel = el('button', 'danger', 'Cancel');
    cancel.type = 'button';
    cancel.setAttribute('aria-label', 'Cancel task ' + id);
    cancel.hidden = true;
    const note = el('span', 'meta');
    note.setAttribute('role', 'status');
    head.append(title, badge, cancel);
    const timeline = el('ol', 'timeline');
    timeline.setAttribute('aria-label', 'Timeline of task ' + id);
    item.append(head, note, timeline);
    task = { id, context: null, item, badge, cancel, note, timeline, text: null, thinking: null, ask: null, wrote: false };
    cancel.addEventListener('click', () => cancelTask(task));
    tasks.set(id, task);
    byId('tasks').prepend(item);
    byId('empty').hidden = true;
    return task;
  }

  function entry(task, cls, label) {
    const item = el('li', cls);
    if (label) item.append(el('div', 'meta', label));
    task.timeline.append(item);
    return item;
  }

  function apply(event, data) {
    const task = taskOf(data.id);
    if (event === 'status') return status(task, data);
    if (event === 'artifact') return artifact(task, data.artifact || {});
    if (event === 'text') return text(task, data);
    if (event === 'thinking') return thinking(task, data);
  }

  function status(task, data) {
    if (typeof data.context_id === 'string') task.context = data.context_id;
    const state = (data.status && data.status.state) || 'unknown';
    const message = (data.status && data.status.message) || '';
    task.badge.textContent = state;
    task.badge.className = 'badge ' + state;
    task.cancel.hidden = data.final === true;
    task.text = null;
    task.thinking = null;
    if (state !== 'input-required' && task.ask) {
      // The question stays in the timeline; only its answer box goes.
      task.ask.remove();
      task.ask = null;
    }
    if (state === 'working') {
      const turn = /^inference turn (\d+)$/.exec(message);
      const item = entry(task, 'status', turn ? 'turn ' + turn[1] : message);
      linkPeer(item, message);
    } else if (state === 'input-required') {
      askBox(task, message);
    } else if (state === 'completed') {
      const end = entry(task, 'status end', 'completed');
      const response = data.status.response;
      if (!task.wrote && typeof response === 'string' && response) end.append(el('p', 'reply', response));
    } else {
      entry(task, 'status end', state + (message ? ': ' + message : ''));
    }
  }

  // A call waiting on a formation member names the member's address: its page gets a
  // link (only an http(s) address; a remote agent's has none).
  function linkPeer(item, message) {
    const wait = /^waiting on peer ([a-z][a-z0-9-]*) \(its task (tsk_[0-9a-f]+), at (https?:\/\/[^\s)]+)\)$/.exec(message);
    if (!wait) return;
    const link = el('a', 'peer', 'open ' + wait[1] + "'s page");
    link.href = wait[3];
    link.target = '_blank';
    link.rel = 'noopener noreferrer';
    link.title = 'task ' + wait[2] + ' of ' + wait[1];
    item.append(link);
  }

  function artifact(task, a) {
    const item = entry(task, 'tool');
    const facts = [];
    if (a.is_error) facts.push('error');
    if (typeof a.duration_ms === 'number') facts.push(a.duration_ms + ' ms');
    if (typeof a.exit_code === 'number') facts.push('exit ' + a.exit_code);
    if (a.truncated) facts.push('truncated');
    const details = el('details');
    const content = typeof a.content === 'string' ? a.content : '';
    details.open = content.length < 2000;
    const summary = el('summary');
    summary.append(el('strong', null, a.tool_name || 'tool'), document.createTextNode(facts.length ? ' · ' + facts.join(' · ') : ''));
    if (a.is_error) summary.append(document.createTextNode(' '), el('span', 'badge error', 'error'));
    details.append(summary, el('pre', 'content', content));
    item.append(details);
    task.text = null;
  }

  function text(task, data) {
    const piece = typeof data.text === 'string' ? data.text : '';
    if (data.final === true) {
      // The whole reply when no chunk came in the turn; "" ends a turn's chunks.
      if (piece) {
        const item = entry(task, 'text', 'reply');
        item.append(el('p', 'reply', piece));
        task.wrote = true;
      }
      task.text = null;
      return;
    }
    if (!task.text) {
      const item = entry(task, 'text', 'reply');
      task.text = el('p', 'reply');
      item.append(task.text);
    }
    task.text.append(document.createTextNode(piece));
    task.wrote = true;
  }

  function thinking(task, data) {
    if (!task.thinking) {
      const item = entry(task, 'think', 'thinking');
      task.thinking = el('p', 'thinking');
      item.append(task.thinking);
    }
    task.thinking.append(document.createTextNode(typeof data.text === 'string' ? data.text : ''));
  }

  function askBox(task, prompt) {
    if (task.ask) task.ask.remove();
    const item = entry(task, 'ask', 'asked');
    item.append(el('p', 'reply', prompt));
    const form = el('form');
    const fieldId = 'answer-' + task.id;
    const label = el('label', null, 'Your answer');
    label.htmlFor = fieldId;
    const input = el('textarea');
    input.id = fieldId;
    input.rows = 2;
    input.required = true;
    const row = el('div', 'row end');
    const note = el('span', 'hint');
    note.setAttribute('role', 'status');
    const button = el('button', null, 'Answer');
    button.type = 'submit';
    row.append(note, button);
    form.append(label, input, row);
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      answer(task, item, form, input.value, button, note);
    });
    item.append(form);
    task.ask = form;
  }

  // The context id is on the task's earlier status frames; a page that attached
  // after them asks the capsule (the A2A v1 `GetTask`).
  async function contextOf(task) {
    if (task.context) return task.context;
    const response = await post(call('GetTask', { id: task.id }), { 'A2A-Version': '1.0' });
    const body = await response.json();
    const context = body && body.result && body.result.contextId;
    if (typeof context !== 'string') throw new Error('the capsule did not say which context the task is in');
    task.context = context;
    return context;
  }

  // How long a sent message's own stream is read for a refusal before the page leaves
  // the rest to the watch (a queued task writes nothing until it runs).
  const SUBMIT_READ_MS = 3000;

  // Sends `message` with message/stream and reads its stream only until it is clear
  // what became of it: a refusal (an `error` frame, a `rejected` status), or a status
  // `ours` recognises as the message taken. The stream carries other tasks' frames
  // too, so those are read past. The watch shows the rest. Resolves with an error
  // text, or ''.
  async function submit(message, ours) {
    const controller = new AbortController();
    const response = await post(call('message/stream', { message }), {}, controller.signal);
    if (response.status === 401) return 'the capsule refused the token';
    const type = response.headers.get('content-type') || '';
    if (type.startsWith('application/json')) {
      const body = await response.json().catch(() => null);
      return (body && body.error && body.error.message) || 'the capsule answered HTTP ' + response.status;
    }
    if (!response.ok || !type.startsWith('text/event-stream')) return 'the capsule answered HTTP ' + response.status;
    let outcome = '';
    const timer = setTimeout(() => controller.abort(), SUBMIT_READ_MS);
    try {
      await readFrames(response, (frame) => {
        if (frame.event === 'error') {
          // Its data may not be JSON (the protocol says so): then it is said as sent.
          const data = parse(frame.data);
          outcome = (data && data.error) || frame.data;
          return false;
        }
        if (frame.event !== 'status') return true;
        const data = parse(frame.data);
        if (!data || !data.status) return true;
        if (data.status.state === 'rejected') {
          outcome = data.status.message || 'rejected';
          return false;
        }
        return !ours(data);
      });
    } catch (error) {
      // Aborted at the time limit: nothing said no.
      if (!controller.signal.aborted) throw error;
    } finally {
      clearTimeout(timer);
      controller.abort();
    }
    return outcome;
  }

  function messageId() {
    const bytes = new Uint8Array(8);
    crypto.getRandomValues(bytes);
    return 'web-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  async function answer(task, item, form, value, button, note) {
    if (!value.trim()) return;
    button.disabled = true;
    note.textContent = 'sending…';
    try {
      const contextId = await contextOf(task);
      const message = { messageId: messageId(), role: 'user', parts: [{ text: value }], contextId };
      // Taken as the answer, the task resumes; taken as a new task (the wait had
      // ended), a task this page has not seen starts.
      const known = new Set(tasks.keys());
      const failed = await submit(message, (data) => data.id === task.id || !known.has(data.id));
      note.textContent = failed ? 'not sent: ' + failed : 'sent';
      // What this page answered stays beside the question (another page's answer
      // is not in any frame, so it shows only here).
      if (!failed) item.insertBefore(el('p', 'meta', 'answered: ' + value), form.parentNode === item ? form : null);
    } catch (error) {
      note.textContent = 'not sent: ' + error.message;
    }
    button.disabled = false;
  }

  async function cancelTask(task) {
    task.cancel.disabled = true;
    task.note.textContent = 'canceling…';
    try {
      const response = await post(call('tasks/cancel', { id: task.id }), {});
      const body = await response.json().catch(() => null);
      task.note.textContent = body && body.error ? 'not canceled: ' + body.error.message : '';
    } catch (error) {
      task.note.textContent = 'not canceled: ' + error.message;
    }
    task.cancel.disabled = false;
  }

  function startCapsule() {
    byId('capsule-view').hidden = false;
    byId('send-form').addEventListener('submit', async (event) => {
      event.preventDefault();
      const input = byId('send-input');
      const value = input.value;
      if (!value.trim()) return;
      const button = byId('send-button');
      const note = byId('send-note');
      button.disabled = true;
      note.textContent = 'sending…';
      try {
        const known = new Set(tasks.keys());
        const message = { messageId: messageId(), role: 'user', parts: [{ text: value }] };
        const failed = await submit(message, (data) => !known.has(data.id));
        note.textContent = failed ? 'not sent: ' + failed : 'sent';
        if (!failed) {
          input.value = '';
          setTimeout(() => {
            if (note.textContent === 'sent') note.textContent = '';
          }, 4000);
        }
      } catch (error) {
        note.textContent = 'not sent: ' + error.message;
      }
      button.disabled = false;
    });
    // The agent card is public: it names the capsule.
    fetch(address + '.well-known/agent-card.json', { cache: 'no-store' })
      .then((r) => (r.ok ? r.json() : null))
      .then((card) => {
        if (card && typeof card.name === 'string') {
          byId('title').textContent = card.name;
          document.title = card.name + ' · mur';
        }
      })
      .catch(() => {});
    // A quiet stream is a busy capsule, not a lost one: say so past a missed heartbeat.
    setInterval(() => {
      const conn = byId('conn');
      if (conn.dataset.state !== 'live' || !lastHeard) return;
      const quiet = Math.round((Date.now() - lastHeard) / 1000);
      if (quiet > 20) conn.textContent = 'live · quiet for ' + quiet + ' s (the capsule is busy)';
    }, 5000);
    watch();
  }

  // ====================================================================
  // The fleet view (mur serve's root): the capsules, through the admin API.
  // ====================================================================

  async function loadFleet() {
    if (!token()) {
      setConn('down', 'needs the admin token');
      askToken('mur serve printed where its admin token is kept ("admin token: FILE").', loadFleet);
      return;
    }
    let response;
    try {
      response = await fetch('/admin/capsules', { headers: auth({}), cache: 'no-store' });
    } catch (error) {
      setConn('down', 'server unreachable');
      return;
    }
    if (response.status === 401) {
      setConn('down', 'needs the admin token');
      askToken('mur serve printed where its admin token is kept ("admin token: FILE").', loadFleet);
      return;
    }
    const body = await response.json().catch(() => null);
    const capsules = (body && Array.isArray(body.capsules)) ? body.capsules : [];
    setConn('live', capsules.length + (capsules.length === 1 ? ' capsule' : ' capsules'));
    const list = byId('capsules');
    list.replaceChildren();
    for (const capsule of capsules) {
      if (typeof capsule.id !== 'string' || !/^[A-Za-z0-9_-]+$/.test(capsule.id)) continue;
      const item = el('li');
      const link = el('a', null, capsule.name || capsule.id);
      link.href = '/c/' + capsule.id + '/';
      const state = String(capsule.state || 'unknown');
      item.append(link, el('span', 'badge ' + state, state), el('span', 'meta', capsule.id), el('span', 'meta', (capsule.tasks_run || 0) + ' tasks run'));
      list.append(item);
    }
    byId('fleet-note').textContent = capsules.length ? 'A capsule with a token of its own asks for it on its page.' : 'No capsules yet: create one with POST /admin/capsules.';
  }

  function startFleet() {
    byId('title').textContent = 'mur serve';
    byId('fleet-view').hidden = false;
    loadFleet();
    setInterval(() => {
      if (token()) loadFleet();
    }, 5000);
  }

  // What a test (or a curious user in the console) can do: drop the watch connection
  // to see the page reconnect and replay.
  window.murView = {
    // How many watch connections the capsule acknowledged so far.
    connections: () => connections,
    // Breaks the connection as a network would: the page goes through its usual
    // loss, wait and reconnect.
    drop() {
      if (watching) watching.abort();
    },
  };

  if (view === 'fleet') startFleet();
  else startCapsule();
})();
