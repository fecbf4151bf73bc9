// README's promise on the built-in demo model (models/demo): `tessera serve` without --model serves
// it; the README's weather request with a weather tool gets a `tool_calls` reply; a plain question
// gets English prose. The expected behaviour is the training recipe's (tools/demo_model), not a
// recording of our own output: any call to get_weather for Paris, any mostly-English answer.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, requireDep, sourceDir } from './lib/server.mjs';

const OpenAI = requireDep('openai');
let server, client;

before(async () => {
  server = await startServer([]);  // no --model: the demo model beside the binary
  client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
});
after(async () => {
  if (server) assert.equal(await server.stop(), 0, server.stderr());
});

test('serves the demo model as a block-diffusion model', async () => {
  const { data } = await client.models.list();
  assert.equal(data[0].id, 'demo');
  const cfg = JSON.parse(fs.readFileSync(path.join(sourceDir, 'models/demo/config.json'), 'utf8'));
  assert.equal(data[0].diffusion.block_size, cfg.block_size);
  assert.equal(data[0].diffusion.mask_token_id, cfg.mask_token_id);
});

test("README's weather request with a weather tool returns a tool call", async () => {
  const readme = fs.readFileSync(path.join(sourceDir, 'README.md'), 'utf8');
  const m = readme.match(/curl -s localhost:8000\/v1\/chat\/completions -H 'content-type: application\/json' -d '([^']+)'/);
  assert.ok(m, 'the README has the curl example');
  const body = JSON.parse(m[1]);
  const r = await client.chat.completions.create(body);
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0].message));
  const call = r.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.match(JSON.parse(call.function.arguments).city, /paris/i);
});

test('a plain question gets English prose', async () => {
  const r = await client.chat.completions.create({ messages: [{ role: 'user', content: 'What is the capital of France?' }], model: 'demo' });
  const text = r.choices[0].message.content;
  assert.equal(r.choices[0].finish_reason, 'stop', text);
  assert.ok(!r.choices[0].message.tool_calls);
  const words = text.split(/\s+/).filter(Boolean);
  assert.ok(words.length >= 3, text);
  // Mostly letters, spaces and punctuation of English text; some common English words.
  const englishChars = (text.match(/[A-Za-z .,'!?;:-]/g) || []).length;
  assert.ok(englishChars / text.length > 0.9, text);
  assert.ok(/\b(the|is|a|of|and|I)\b/i.test(text), text);
});
