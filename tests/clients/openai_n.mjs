// n > 1 against a running `loom serve` (issue 16): the n choices of a
// request share its prompt's prefill and each samples with its own seed,
// derived from the request's (choice i: seed + i * 0x9E3779B97F4A7C15 mod
// 2^64, the first the request's own). What must come back, through the
// official `openai` npm client: n choices with index 0..n-1, usage counting
// the prompt's tokens once (as OpenAI does), and each choice's text equal to
// a lone request's with that choice's seed, which is sent over raw HTTP (the
// derived seeds pass 2^53, past what a JSON number in JavaScript holds).
// Chat and completions, streamed and not.
// Usage: node openai_n.mjs BASE_URL [API_KEY]. Exits 0 when every check passes.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { check, finish } from './checks.mjs';

const baseURL = process.argv[2];
const apiKey = process.argv[3] || 'unused';
if (!baseURL) {
  console.error('usage: node openai_n.mjs BASE_URL [API_KEY]');
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });


const model = (await client.models.list()).data[0].id;
const seed = 11;
const n = 3;
// sampled, so that choices differ and each depends on its seed
const sampling = { model, temperature: 1.0, top_k: 50, max_tokens: 8, ignore_eos: true };
const prompt = 'In the beginning God created';
const messages = [{ role: 'user', content: 'Tell me about the beginning.' }];

// Choice i's seed as the server derives it, as a signed 64-bit decimal.
const choiceSeed = (i) =>
  BigInt.asIntN(64, BigInt(seed) + BigInt(i) * 0x9e3779b97f4a7c15n).toString();

// One lone request over raw HTTP with choice i's seed spliced in as a
// literal integer.
async function lone(path, body, i) {
  const text = JSON.stringify(body).replace(/}$/, `,"seed":${choiceSeed(i)}}`);
  const r = await fetch(`${baseURL}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: text,
  });
  assert.equal(r.status, 200, await r.clone().text());
  return r.json();
}

const text = (kind, c) => (kind === 'chat' ? c.message.content : c.text);

for (const kind of ['completions', 'chat']) {
  const path = kind === 'chat' ? '/chat/completions' : '/completions';
  const body = kind === 'chat' ? { ...sampling, messages } : { ...sampling, prompt };
  const api = kind === 'chat' ? client.chat.completions : client.completions;

  const refs = [];
  for (let i = 0; i < n; i++) refs.push(await lone(path, body, i));

  await check(`${kind}: n=${n} gives ${n} choices, index 0..${n - 1}, each the lone request with its seed`, async () => {
    const r = await api.create({ ...body, n, seed });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    for (let i = 0; i < n; i++) {
      assert.equal(refs[i].choices.length, 1);
      assert.equal(text(kind, r.choices[i]), text(kind, refs[i].choices[0]), `choice ${i}`);
      assert.equal(r.choices[i].finish_reason, 'length');
    }
    // the seeds differ, so the sampled texts do (8 tokens at temperature 1)
    assert.ok(new Set(r.choices.map((c) => text(kind, c))).size > 1,
      'three seeds gave one text');
    // the prompt once, as OpenAI counts it; the completions of all choices
    assert.equal(r.usage.prompt_tokens, refs[0].usage.prompt_tokens);
    assert.equal(r.usage.completion_tokens, n * sampling.max_tokens);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  });

  await check(`${kind}: n=${n} streamed gives the same choices, usage once`, async () => {
    const stream = await api.create({
      ...body, n, seed, stream: true, stream_options: { include_usage: true },
    });
    const got = Array(n).fill('');
    const finish = {};
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) {
        assert.ok(ch.index >= 0 && ch.index < n, `index ${ch.index}`);
        got[ch.index] += (kind === 'chat' ? ch.delta?.content : ch.text) || '';
        if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
      }
    }
    assert.deepEqual(finish, { 0: 'length', 1: 'length', 2: 'length' });
    for (let i = 0; i < n; i++)
      assert.equal(got[i], text(kind, refs[i].choices[0]), `choice ${i}`);
    assert.ok(usage, 'no usage chunk');
    assert.equal(usage.prompt_tokens, refs[0].usage.prompt_tokens);
    assert.equal(usage.completion_tokens, n * sampling.max_tokens);
  });
}

await check('completions: two prompts with n=2: four choices, prompt i at 2i and 2i+1', async () => {
  const other = 'And God said';
  const r = await client.completions.create({ ...sampling, prompt: [prompt, other], n: 2, seed });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  const a = await client.completions.create({ ...sampling, prompt, n: 2, seed });
  assert.equal(r.choices[0].text, a.choices[0].text);
  assert.equal(r.choices[1].text, a.choices[1].text);
  // each prompt counted once
  const pa = a.usage.prompt_tokens;
  const pb = (await client.completions.create({ ...sampling, prompt: other, max_tokens: 1 })).usage.prompt_tokens;
  assert.equal(r.usage.prompt_tokens, pa + pb);
});

finish();
