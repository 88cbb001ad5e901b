// The chat API of issue 16 through the official `openai` npm client, against
// `loom serve loom/tiny` (tests/cli/clients.sh: the tiny model in a hub
// cache, with generation_config.json defaults {temperature 0,
// max_new_tokens 5} and a template that writes the tool names, a
// `flavor` template argument and opens a <think> block).
// Usage: node openai_chat_api.mjs BASE_URL CONTEXT
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { check, finish } from './checks.mjs';

const baseURL = process.argv[2];
const context = Number(process.argv[3]);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });


const model = 'loom/tiny';
const user = [{ role: 'user', content: 'hi' }];
const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } }];
const prompt = async (body) =>
  (await client.chat.completions.create({ model, max_tokens: 1, ...body })).usage.prompt_tokens;

await check('models: the hub id, max_model_len', async () => {
  const m = await client.models.list();
  assert.equal(m.data[0].id, model);
  assert.equal(m.data[0].max_model_len, context);
  const c = await client.chat.completions.create({ model, messages: user, max_tokens: 1 });
  assert.equal(c.model, model);
});

await check('tools and chat_template_kwargs reach the template; tool_choice none drops tools', async () => {
  const plain = await prompt({ messages: user });
  const withTools = await prompt({ messages: user, tools });
  const none = await prompt({ messages: user, tools, tool_choice: 'none' });
  const auto = await prompt({ messages: user, tools, tool_choice: 'auto' });
  const kw = await prompt({ messages: user, chat_template_kwargs: { flavor: 'spicy' } });
  assert.ok(withTools > plain, `${withTools} > ${plain}`);
  assert.equal(none, plain);
  assert.equal(auto, withTools);
  assert.ok(kw > plain);
  // a named choice that is in tools is accepted; one that is not is a 400
  await prompt({ messages: user, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  await assert.rejects(
    prompt({ messages: user, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === 'tool_choice');
});

await check('history with assistant tool_calls and tool results renders', async () => {
  const history = [
    ...user,
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 3}' },
  ];
  const n = await prompt({ messages: history, tools });
  assert.ok(n > await prompt({ messages: user, tools }));
});

await check('reasoning_content from the opened think block, plain and streamed', async () => {
  const body = { model, messages: user, max_tokens: 8, ignore_eos: true, stop: ['</think>'] };
  const c = await client.chat.completions.create(body);
  const msg = c.choices[0].message;
  assert.equal(typeof msg.reasoning_content, 'string');
  assert.ok(msg.reasoning_content.length > 0);
  assert.equal(msg.content, '');
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let reasoning = '';
  let content = '';
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      reasoning += ch.delta.reasoning_content ?? '';
      content += ch.delta.content ?? '';
    }
  }
  assert.equal(reasoning, msg.reasoning_content);
  assert.equal(content, '');
});

await check('generation_config defaults: greedy, max_new_tokens', async () => {
  const a = await client.completions.create({ model, prompt: 'In the beginning', ignore_eos: true });
  assert.equal(a.usage.completion_tokens, 5);
  const b = await client.completions.create({ model, prompt: 'In the beginning', ignore_eos: true, temperature: 0, max_tokens: 5 });
  assert.equal(a.choices[0].text, b.choices[0].text);
});

await check('n = 2 on chat, streamed: two choices', async () => {
  const stream = await client.chat.completions.create({
    model, messages: user, n: 2, max_tokens: 4, ignore_eos: true, stream: true,
  });
  const finish = {};
  for await (const chunk of stream)
    for (const ch of chunk.choices) if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
  assert.deepEqual(finish, { 0: 'length', 1: 'length' });
});

await check('response_format and other fields loom does not honour: 400 by name', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: user, response_format: { type: 'json_object' } }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === 'response_format' &&
      /constrained decoding/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({
      model, messages: user,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === 'response_format');
  await assert.rejects(
    client.completions.create({ model, prompt: 'a', suffix: 'b' }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === 'suffix');
  await assert.rejects(
    client.chat.completions.create({ model, messages: user, modalities: ['audio'] }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === 'modalities');
});

finish();
