// A real OpenAI client (the official `openai` npm package) against a running
// `loom serve`: models, completions, chat completions, streaming of both, and
// an error. Usage: node openai_client.mjs BASE_URL [API_KEY]
// Exits 0 when every check passes, 1 otherwise.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { check, finish } from './checks.mjs';

const baseURL = process.argv[2];
const apiKey = process.argv[3] || 'unused';
if (!baseURL) {
  console.error('usage: node openai_client.mjs BASE_URL [API_KEY]');
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });


const models = await client.models.list();
const model = models.data[0]?.id;

await check('models.list and models.retrieve', async () => {
  assert.equal(models.data.length, 1);
  assert.equal(typeof model, 'string');
  assert.equal(models.data[0].object, 'model');
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);
  await assert.rejects(client.models.retrieve('no-such-model'),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

const prompt = 'In the beginning';
const greedy = { model, max_tokens: 12, temperature: 0 };

await check('completions (plain and streamed agree)', async () => {
  const c = await client.completions.create({ ...greedy, prompt });
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices.length, 1);
  const text = c.choices[0].text;
  assert.equal(typeof text, 'string');
  assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason));
  assert.ok(c.usage.prompt_tokens > 0);
  assert.ok(c.usage.completion_tokens > 0 && c.usage.completion_tokens <= 12);
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);

  const stream = await client.completions.create({
    ...greedy, prompt, stream: true, stream_options: { include_usage: true },
  });
  let streamed = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      streamed += ch.text ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(streamed, text);
  assert.equal(finish, c.choices[0].finish_reason);
  assert.deepEqual(usage, c.usage);
});

const messages = [
  { role: 'system', content: 'You answer briefly.' },
  { role: 'user', content: 'What was in the beginning?' },
];

await check('chat.completions (plain and streamed agree)', async () => {
  const c = await client.chat.completions.create({ ...greedy, messages });
  assert.equal(c.object, 'chat.completion');
  const msg = c.choices[0].message;
  assert.equal(msg.role, 'assistant');
  assert.equal(typeof msg.content, 'string');
  assert.ok(['stop', 'length'].includes(c.choices[0].finish_reason));
  assert.ok(c.usage.prompt_tokens > 0);

  const stream = await client.chat.completions.create({
    ...greedy, messages, stream: true, stream_options: { include_usage: true },
  });
  let streamed = '';
  let role = null;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.role) role = ch.delta.role;
      streamed += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(streamed, msg.content);
  assert.equal(finish, c.choices[0].finish_reason);
  assert.deepEqual(usage, c.usage);
});

await check('chat.completions with logprobs', async () => {
  const c = await client.chat.completions.create({
    ...greedy, max_tokens: 4, messages, logprobs: true, top_logprobs: 2,
  });
  const lp = c.choices[0].logprobs.content;
  assert.equal(lp.length, c.usage.completion_tokens);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(Array.isArray(t.bytes));
  }
});

await check('models report max_model_len', async () => {
  assert.equal(typeof models.data[0].max_model_len, 'number');
  assert.ok(models.data[0].max_model_len > 0);
});

await check('completions: 16 tokens by default, max_tokens over the context is a 400', async () => {
  const c = await client.completions.create({ model, prompt, ignore_eos: true });
  assert.equal(c.usage.completion_tokens, 16);
  const ctx = models.data[0].max_model_len;
  await assert.rejects(
    client.completions.create({ model, prompt, max_tokens: ctx }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === 'max_tokens' &&
      e.message.includes(String(ctx)) && e.message.includes(`${c.usage.prompt_tokens} tokens`));
});

const c0Tokens = (lp) => lp.token_logprobs.length;

await check('n, prompt arrays, echo (with the prompt\'s logprobs)', async () => {
  const n = await client.completions.create({ ...greedy, prompt, n: 3, max_tokens: 4, ignore_eos: true });
  assert.deepEqual(n.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(n.usage.completion_tokens, 12);
  const batch = await client.completions.create({ ...greedy, prompt: [prompt, 'And God said'], max_tokens: 4 });
  assert.equal(batch.choices.length, 2);
  const one = await client.completions.create({ ...greedy, prompt: 'And God said', max_tokens: 4 });
  assert.equal(batch.choices[1].text, one.choices[0].text);
  const echo = await client.completions.create({ ...greedy, prompt, max_tokens: 4, echo: true });
  const plain = await client.completions.create({ ...greedy, prompt, max_tokens: 4 });
  assert.equal(echo.choices[0].text, prompt + plain.choices[0].text);
  const elp = await client.completions.create({ ...greedy, prompt, max_tokens: 2, echo: true, logprobs: 2 });
  const plp = elp.choices[0].logprobs;
  assert.equal(plp.token_logprobs[0], null);
  assert.equal(plp.tokens.length, c0Tokens(plp) + 0);
  assert.ok(plp.token_logprobs.slice(1).every((x) => typeof x === 'number' && x <= 0));
  assert.equal(plp.tokens.join(''), elp.choices[0].text);
  const chat = await client.chat.completions.create({ ...greedy, messages, n: 2, max_tokens: 3 });
  assert.equal(chat.choices.length, 2);
  assert.equal(chat.choices[0].message.content, chat.choices[1].message.content);
});

await check('completions top_logprobs: every asked entry comes back', async () => {
  const c = await client.completions.create({ model, prompt, max_tokens: 12, logprobs: 5, temperature: 1, seed: 3 });
  for (const top of c.choices[0].logprobs.top_logprobs)
    assert.equal(Object.keys(top).length, 5);
});

await check('a bad request is a BadRequestError (400)', async () => {
  await assert.rejects(
    client.completions.create({ model, prompt, max_tokens: 'ten' }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
      e.error?.param === 'max_tokens');
});

finish();
