// The chat page of `loom serve` in a real browser: Debian's chromium, headless,
// driven by playwright-core (no browser download). Run by webui.sh.
//   node webui_browser.mjs open URL ARTIFACT_DIR   a server without keys
//   node webui_browser.mjs keyed URL KEY ARTIFACT_DIR   one with --api-key-file
// Every reply the page shows is checked against the API answered directly
// (non-streamed, same request), not against what the page printed.
// Exits 0 when every check passes, 1 otherwise.
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [mode, base, ...rest] = process.argv.slice(2);
if (!['open', 'keyed'].includes(mode) || !base) {
  console.error('usage: node webui_browser.mjs open URL ARTIFACT_DIR | keyed URL KEY ARTIFACT_DIR');
  process.exit(2);
}
const key = mode === 'keyed' ? rest[0] : null;
const artifacts = mode === 'keyed' ? rest[1] : rest[0];
const WAIT = 60000;

let failed = 0;
let passed = 0;
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passed++;
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

const auth = key ? { Authorization: `Bearer ${key}` } : {};
async function api(route, body) {
  const r = await fetch(base + route, {
    method: body ? 'POST' : 'GET',
    headers: { ...auth, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return { status: r.status, json: await r.json().catch(() => null) };
}
async function activeStreams() {
  const text = await (await fetch(base + '/metrics')).text();
  const m = /^loom_streams_active (\d+)$/m.exec(text);
  assert.ok(m, 'no loom_streams_active in /metrics');
  return Number(m[1]);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'], // CI runs as root
});
const consoleErrors = [];
const dialogs = [];
async function newPage(viewport) {
  const page = await browser.newPage({ viewport: viewport || { width: 1280, height: 860 } });
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push('pageerror: ' + e.message));
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
  return page;
}

// Sets the settings fields (strings; '' empties a field).
async function settings(page, s) {
  const ids = { system: '#system', temperature: '#temperature', top_p: '#top-p',
    max_tokens: '#max-tokens', seed: '#seed' };
  for (const [k, v] of Object.entries(s)) await page.fill(ids[k], String(v));
}

// Sends PROMPT from the composer and waits for the reply to end; returns
// the reply's text, its figures line and how its text grew meanwhile.
async function ask(page, prompt) {
  const n = await page.locator('.turn.assistant').count();
  await page.evaluate(() => {
    window.__growth = [];
    const log = document.getElementById('log');
    new MutationObserver(() => {
      const t = [...document.querySelectorAll('.turn.assistant .text')].pop();
      if (t) window.__growth.push(t.textContent.length);
    }).observe(log, { subtree: true, childList: true, characterData: true });
  });
  await page.fill('#prompt', prompt);
  await page.press('#prompt', 'Enter');
  const reply = page.locator('.turn.assistant').nth(n);
  await reply.locator('.figures, .error').first().waitFor({ timeout: WAIT });
  return {
    reply,
    text: await reply.locator('.body > .text').textContent(),
    figures: (await reply.locator('.figures').count())
      ? await reply.locator('.figures').textContent() : null,
    growth: await page.evaluate(() => [...new Set(window.__growth.filter((x) => x > 0))]),
  };
}

// Whether SELECTOR's box overlaps the viewport.
async function inView(page, selector) {
  const box = await page.locator(selector).boundingBox();
  const vp = page.viewportSize();
  return !!box && box.x < vp.width && box.x + box.width > 0 && box.y < vp.height &&
    box.y + box.height > 0;
}

async function newChat(page) {
  await page.click('#new-chat');
  assert.equal(await page.locator('.turn').count(), 0);
}

const FIGURES = /^(\d+) tokens? · ([\d.]+) tok\/s · first token (\d+ ms|[\d.]+ s) · prompt (\d+) · total /;

if (mode === 'open') {
  const models = await api('/v1/models');
  const model = models.json.data[0].id;
  const health = await api('/health');
  const page = await newPage();

  await check('the page loads with its CSP; model and device shown', async () => {
    const r = await page.goto(base + '/');
    assert.equal(r.status(), 200);
    const csp = r.headers()['content-security-policy'];
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'/);
    assert.doesNotMatch(csp, /unsafe/);
    await page.locator('#model', { hasText: model }).waitFor({ timeout: WAIT });
    await page.locator('#health', { hasText: 'ready' }).waitFor({ timeout: WAIT });
    assert.equal(await page.textContent('#device'), health.json.device.toUpperCase());
  });

  await check('a reply streams in, equals the API answer, and its figures are filled', async () => {
    // long enough that it cannot all land in one read
    await settings(page, { system: 'You continue scripture.', temperature: 0, top_p: 1,
      max_tokens: 200, seed: '' });
    const prompt = 'In the beginning';
    const got = await ask(page, prompt);
    // text appeared piece by piece, not all at once at the end
    assert.ok(got.growth.length >= 3, `text grew in ${got.growth.length} steps`);
    const ref = await api('/v1/chat/completions', {
      model, temperature: 0, top_p: 1, max_tokens: 200,
      messages: [{ role: 'system', content: 'You continue scripture.' },
        { role: 'user', content: prompt }],
    });
    assert.equal(ref.status, 200);
    assert.ok(ref.json.choices[0].message.content.length > 0);
    assert.equal(got.text, ref.json.choices[0].message.content);
    const m = FIGURES.exec(got.figures);
    assert.ok(m, `figures line: ${got.figures}`);
    assert.equal(Number(m[1]), ref.json.usage.completion_tokens);
    assert.equal(Number(m[4]), ref.json.usage.prompt_tokens);
    assert.ok(Number(m[2]) > 0);
    await page.screenshot({ path: path.join(artifacts, 'webui-reply.png') });
  });

  await check('a second turn carries the conversation', async () => {
    const first = await page.locator('.turn.assistant .body > .text').first().textContent();
    await settings(page, { max_tokens: 40 });
    const got = await ask(page, 'And God said');
    const ref = await api('/v1/chat/completions', {
      model, temperature: 0, top_p: 1, max_tokens: 40,
      messages: [{ role: 'system', content: 'You continue scripture.' },
        { role: 'user', content: 'In the beginning' },
        { role: 'assistant', content: first },
        { role: 'user', content: 'And God said' }],
    });
    assert.equal(got.text, ref.json.choices[0].message.content);
    await page.screenshot({ path: path.join(artifacts, 'webui-conversation.png') });
  });

  await check('stop mid-reply cancels the request and the server frees the stream', async () => {
    await newChat(page);
    await settings(page, { system: '', temperature: 0, max_tokens: 3000 });
    await page.fill('#prompt', 'Blessed are the');
    await page.press('#prompt', 'Enter');
    const text = page.locator('.turn.assistant .body > .text');
    await page.waitForFunction(() => {
      const t = document.querySelector('.turn.assistant .text');
      return t && t.textContent.length > 40;
    }, null, { timeout: WAIT });
    assert.ok(await page.isVisible('#stop'), 'the stop button shows while streaming');
    assert.equal(await activeStreams(), 1, 'one stream is live before stop');
    await page.click('#stop');
    const t0 = Date.now();
    let active = 1;
    while (Date.now() - t0 < 10000 && (active = await activeStreams()) !== 0)
      await new Promise((r) => setTimeout(r, 100));
    assert.equal(active, 0, 'loom_streams_active after stop');
    await page.locator('.turn.assistant .figures', { hasText: 'stopped' }).waitFor({ timeout: WAIT });
    assert.ok(await page.isVisible('#send'));
    assert.ok(!(await page.isVisible('#stop')));
    const len = (await text.textContent()).length;
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await text.textContent()).length, len, 'no text after stop');
  });

  await check('the same seed gives the same reply twice, another seed another', async () => {
    const prompt = 'And Jesus said unto them';
    const replyWith = async (seed) => {
      await newChat(page);
      await settings(page, { temperature: 1, top_p: 1, max_tokens: 30, seed });
      const got = await ask(page, prompt);
      assert.ok(got.figures && FIGURES.test(got.figures), `figures: ${got.figures}`);
      return got.text;
    };
    const a = await replyWith(1234);
    const b = await replyWith(1234);
    const c = await replyWith(987654);
    assert.ok(a.length > 0);
    assert.equal(a, b);
    assert.notEqual(a, c);
    const ref = await api('/v1/chat/completions', {
      model, temperature: 1, top_p: 1, max_tokens: 30, seed: 1234,
      messages: [{ role: 'user', content: prompt }],
    });
    assert.equal(a, ref.json.choices[0].message.content);
  });

  await check('copy puts the reply on the clipboard', async () => {
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write']);
    const reply = page.locator('.turn.assistant').last();
    await reply.locator('.copy').click();
    await reply.locator('.copy', { hasText: 'Copied' }).waitFor({ timeout: WAIT });
    const clip = await page.evaluate(() => navigator.clipboard.readText());
    assert.equal(clip, await reply.locator('.body > .text').textContent());
  });

  await check('no console errors and no dialogs on the real server', async () => {
    assert.deepEqual(consoleErrors, []);
    assert.deepEqual(dialogs, []);
  });

  await check('a narrow window: one column, settings in a drawer', async () => {
    const p = await newPage({ width: 390, height: 800 });
    await p.goto(base + '/');
    await p.locator('#model', { hasText: model }).waitFor({ timeout: WAIT });
    assert.ok(!(await inView(p, '#settings')), 'settings stay out of the way on a narrow window');
    await settings(p, { temperature: 0, max_tokens: 30 });
    const got = await ask(p, 'In the beginning');
    assert.ok(FIGURES.test(got.figures), `figures: ${got.figures}`);
    const box = await got.reply.boundingBox();
    assert.ok(box.x >= 0 && box.x + box.width <= 390, `reply box ${JSON.stringify(box)}`);
    await p.screenshot({ path: path.join(artifacts, 'webui-narrow.png') });
    await p.click('#toggle-settings');
    await p.waitForTimeout(400); // the drawer slides in
    assert.ok(await inView(p, '#settings'), 'the settings drawer opens');
    await p.screenshot({ path: path.join(artifacts, 'webui-narrow-settings.png') });
    await p.mouse.click(10, 400); // beside the drawer
    await p.waitForTimeout(400);
    assert.ok(!(await inView(p, '#settings')), 'a tap beside the drawer closes it');
    await p.close();
  });

  // A stub server streams what a model could say: markup, markdown and
  // reasoning. It serves the page files exactly as loom sent them.
  const EVIL = ['<scr', 'ipt>alert(1)</script>', '\n**bold** _it_ `code`\n# Heading\n',
    '<img src=x onerror=alert(2)>', ' [link](javascript:alert(3)) &amp; &lt;b&gt;'];
  const THINK = ['Let me <b>think</b>', ' about <i>it</i>.'];
  const stub = http.createServer(async (req, res) => {
    const url = req.url.split('?')[0];
    if (req.method === 'GET' && (url === '/' || /^\/(index\.html|webui\.(js|css))$/.test(url))) {
      const r = await fetch(base + url);
      const h = {};
      for (const n of ['content-type', 'content-security-policy', 'x-content-type-options'])
        h[n] = r.headers.get(n);
      res.writeHead(r.status, h);
      res.end(Buffer.from(await r.arrayBuffer()));
      return;
    }
    if (url === '/health') {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{"status":"ok","device":"cpu"}');
      return;
    }
    if (url === '/v1/models') {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{"object":"list","data":[{"id":"stub<i>model</i>","object":"model"}]}');
      return;
    }
    let body = '';
    for await (const c of req) body += c;
    const q = JSON.parse(body);
    if (q.messages.at(-1).content === 'busy') {
      res.writeHead(429, { 'Content-Type': 'application/json', 'Retry-After': '1' });
      res.end('{"error":{"message":"too many requests waiting (queue full); retry later","type":"rate_limit_error","param":null,"code":"queue_full"}}');
      return;
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    const send = (o) => res.write(`data: ${JSON.stringify(o)}\n\n`);
    const chunk = (delta, finish = null) => send({ id: 'x', object: 'chat.completion.chunk',
      choices: [{ index: 0, delta, finish_reason: finish }] });
    const pause = () => new Promise((r) => setTimeout(r, 40));
    chunk({ role: 'assistant', content: '' });
    for (const t of THINK) { await pause(); chunk({ reasoning_content: t }); }
    for (const t of EVIL) { await pause(); chunk({ content: t }); }
    chunk({}, 'stop');
    send({ id: 'x', object: 'chat.completion.chunk', choices: [],
      usage: { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 } });
    res.end('data: [DONE]\n\n');
  });
  await new Promise((r) => stub.listen(0, '127.0.0.1', r));
  const stubUrl = `http://127.0.0.1:${stub.address().port}`;

  await check('markup and markdown from the model are shown as text, never run', async () => {
    const p = await newPage();
    await p.goto(stubUrl + '/');
    await p.locator('#model', { hasText: 'stub<i>model</i>' }).waitFor({ timeout: WAIT });
    const got = await ask(p, 'say something nasty');
    assert.equal(got.text, EVIL.join(''));
    const tags = '.turn script, .turn img, .turn a, .turn b, .turn i, .turn h1';
    assert.equal(await p.locator(tags).count(), 0);
    assert.equal(await p.locator('#model i').count(), 0);
    assert.match(got.figures, /^7 tokens · [\d.]+ tok\/s · first token /);
    // reasoning: folded (closed) under the reply, as text
    const details = got.reply.locator('details.reasoning');
    assert.equal(await details.count(), 1);
    assert.equal(await details.getAttribute('open'), null);
    assert.equal(await details.locator('.reasoning-text').textContent(), THINK.join(''));
    await details.locator('summary').click();
    assert.equal(await details.getAttribute('open'), '');
    await p.waitForTimeout(300);
    assert.deepEqual(dialogs, [], 'no script ran');
    await p.screenshot({ path: path.join(artifacts, 'webui-text-only.png') });
    await p.close();
  });

  await check('a busy server (429) is said plainly', async () => {
    const p = await newPage();
    await p.goto(stubUrl + '/');
    const got = await ask(p, 'busy');
    const err = await got.reply.locator('.error').textContent();
    assert.match(err, /server is busy \(429\)/);
    assert.match(err, /queue full/);
    await p.close();
  });
  stub.close();
} else {
  const page = await newPage();
  const models = await api('/v1/models');
  const model = models.json.data[0].id;

  await check('a keyed server: the page loads without a key, the API asks for one', async () => {
    const r = await page.goto(base + '/');
    assert.equal(r.status(), 200);
    await page.locator('#model', { hasText: 'API key needed' }).waitFor({ timeout: WAIT });
    assert.match(await page.textContent('#key-note'), /needs an API key/);
    await settings(page, { temperature: 0, max_tokens: 20 });
    const got = await ask(page, 'In the beginning');
    assert.match(await got.reply.locator('.error').textContent(), /needs an API key \(401\)/);
  });

  await check('a wrong key is refused and the page says so', async () => {
    await page.fill('#api-key', 'sk-not-the-key');
    await page.click('#save-key');
    await page.locator('#key-note', { hasText: 'refused this key (401)' }).waitFor({ timeout: WAIT });
    const got = await ask(page, 'In the beginning');
    assert.match(await got.reply.locator('.error').textContent(), /refused the API key \(401\)/);
    await page.screenshot({ path: path.join(artifacts, 'webui-wrong-key.png') });
  });

  await check('the right key: model shown, reply streams, key kept for the tab only', async () => {
    await page.fill('#api-key', key);
    await page.press('#api-key', 'Enter');
    await page.locator('#model', { hasText: model }).waitFor({ timeout: WAIT });
    // the failed turns' Retry resends the last prompt, now with the key
    await page.locator('.turn.assistant').last().locator('.retry').click();
    const reply = page.locator('.turn.assistant').last();
    await reply.locator('.figures').waitFor({ timeout: WAIT });
    const ref = await api('/v1/chat/completions', {
      model, temperature: 0, max_tokens: 20,
      messages: [{ role: 'user', content: 'In the beginning' }],
    });
    assert.equal(await reply.locator('.body > .text').textContent(), ref.json.choices[0].message.content);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('loom.apiKey')), key);
    const local = await page.evaluate(() => JSON.stringify(localStorage));
    assert.ok(!local.includes(key), 'the key is not in localStorage');
    await page.reload();
    await page.locator('#model', { hasText: model }).waitFor({ timeout: WAIT });
  });
}

await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
