// The official `openai` npm client against a real `tessera serve` on the autoregressive fixture
// model (tiny random qwen3_moe + the 264-token byte tokenizer): models, chat, completions, streaming,
// tool-call round trip, logprobs, error cases (the client's own error classes), and every response
// checked against the client's TypeScript declarations with tsc (see typecheck below).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, requireDep, nodeModulesDir, arModel, bytesTokenizer, scrape, metricValue } from './lib/server.mjs';

const OpenAI = requireDep('openai');
const KEY = 'sk-test-node-client';
let server, client;
// Responses to check against the client's types: [type name, JSON].
const typed = [];

before(async () => {
  server = await startServer(['--model', arModel, '--tokenizer', bytesTokenizer, '--served-model-name', 'fixture',
                              '--api-key', KEY, '--max-model-len', '1024']);
  client = new OpenAI({ apiKey: KEY, baseURL: `${server.url}/v1`, maxRetries: 0 });
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0, server.stderr());
});

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

test('models.list serves the configured name', async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  assert.deepEqual(ids, ['fixture']);
  typed.push(['Model', page.data[0]]);
});

test('chat completion (greedy) and its stream carry the same text', async () => {
  const req = { model: 'fixture', messages: [{ role: 'user', content: 'hello there' }], max_tokens: 12, temperature: 0 };
  const full = await client.chat.completions.create(req);
  typed.push(['ChatCompletion', full]);
  assert.equal(full.object, 'chat.completion');
  assert.equal(full.choices.length, 1);
  assert.equal(full.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(full.choices[0].finish_reason));
  assert.ok(full.usage.prompt_tokens > 0);
  assert.equal(full.usage.total_tokens, full.usage.prompt_tokens + full.usage.completion_tokens);

  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    typed.push(['ChatCompletionChunk', chunk]);
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2);
  assert.equal(text, full.choices[0].message.content ?? '');
  assert.equal(finish, full.choices[0].finish_reason);
  // The same prompt again: its full KV pages (16 tokens each) come from the prefix cache.
  const { prompt_tokens_details: cachedNow, ...restNow } = usage;
  const { prompt_tokens_details: cachedBefore, ...restBefore } = full.usage;
  assert.deepEqual(restNow, restBefore);
  assert.equal(cachedBefore.cached_tokens, 0);
  assert.equal(cachedNow.cached_tokens, Math.floor((full.usage.prompt_tokens - 1) / 16) * 16);
});

test('completions: text prompt, token-id prompt, stream, logprobs', async () => {
  const a = await client.completions.create({ model: 'fixture', prompt: 'abc', max_tokens: 6, temperature: 0, logprobs: 2 });
  typed.push(['Completion', a]);
  assert.equal(a.object, 'text_completion');
  assert.equal(a.choices[0].logprobs.tokens.length, a.usage.completion_tokens);
  assert.equal(a.choices[0].logprobs.top_logprobs[0] && Object.keys(a.choices[0].logprobs.top_logprobs[0]).length <= 2, true);
  // The byte tokenizer maps 'abc' to the ids 97, 98, 99: the same request as ids gives the same text.
  const b = await client.completions.create({ model: 'fixture', prompt: [97, 98, 99], max_tokens: 6, temperature: 0 });
  assert.equal(b.choices[0].text, a.choices[0].text);
  let streamed = '';
  for await (const chunk of await client.completions.create({ model: 'fixture', prompt: 'abc', max_tokens: 6, temperature: 0, stream: true })) {
    typed.push(['CompletionChunk', chunk]);
    streamed += chunk.choices[0]?.text ?? '';
  }
  assert.equal(streamed, a.choices[0].text);
});

test('chat logprobs: one entry per token, top_logprobs sorted', async () => {
  const r = await client.chat.completions.create({
    model: 'fixture', messages: [{ role: 'user', content: 'x' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  typed.push(['ChatCompletion', r]);
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(t.logprob >= t.top_logprobs[0].logprob - 1e-5);
    for (let i = 1; i < 3; i++) assert.ok(t.top_logprobs[i - 1].logprob >= t.top_logprobs[i].logprob);
  }
});

test('tool-call round trip: forced call, then the tool result answered', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  // A named tool_choice opens the reply with the call and its name, so even this random model
  // answers with a call to get_weather (its arguments are noise: then the reply is plain text).
  const r1 = await client.chat.completions.create({
    model: 'fixture', messages, tools: [weatherTool], tool_choice: { type: 'function', function: { name: 'get_weather' } },
    max_tokens: 24, temperature: 0,
  });
  typed.push(['ChatCompletion', r1]);
  const choice = r1.choices[0];
  if (choice.finish_reason === 'tool_calls') {
    assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
    JSON.parse(choice.message.tool_calls[0].function.arguments);
  } else {
    // Malformed arguments are returned as text, never as an error.
    assert.match(choice.message.content, /<tool_call>/);
  }
  // The round trip: the assistant's call and the tool's result go back through the template.
  const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } };
  const r2 = await client.chat.completions.create({
    model: 'fixture', tools: [weatherTool], max_tokens: 8, temperature: 0,
    messages: [...messages, { role: 'assistant', content: null, tool_calls: [call] },
               { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 18}' }],
  });
  typed.push(['ChatCompletion', r2]);
  assert.equal(r2.choices.length, 1);
  assert.ok(r2.usage.prompt_tokens > r1.usage.prompt_tokens);
});

test('error cases: the client raises its own error classes, the server keeps serving', async () => {
  const cases = [
    [{ model: 'fixture', messages: [] }, OpenAI.BadRequestError, 400],
    [{ model: 'fixture', messages: 'hi' }, OpenAI.BadRequestError, 400],
    [{ model: 'fixture', messages: [{ role: 'user', content: 'x' }], max_tokens: 'ten' }, OpenAI.BadRequestError, 400],
    [{ model: 'fixture', messages: [{ role: 'user', content: 'x' }], n: 17 }, OpenAI.BadRequestError, 400],
    [{ model: 'fixture', messages: [{ role: 'user', content: 'x'.repeat(1100) }] }, OpenAI.BadRequestError, 400],
    [{ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }, OpenAI.NotFoundError, 404],
  ];
  for (const [body, cls, status] of cases) {
    await assert.rejects(client.chat.completions.create(body), (e) => {
      assert.ok(e instanceof cls, `${JSON.stringify(body).slice(0, 80)}: ${e}`);
      assert.equal(e.status, status);
      assert.equal(typeof e.error?.message, 'string');
      assert.ok(e.error.message.length > 0);
      return true;
    });
  }
  // Malformed JSON never reaches the client's types: check the raw answer.
  const raw = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: '{"model": ',
  });
  assert.equal(raw.status, 400);
  const err = await raw.json();
  assert.equal(typeof err.error.message, 'string');
  assert.equal(err.error.type, 'invalid_request_error');
  const bad = new OpenAI({ apiKey: 'sk-wrong', baseURL: `${server.url}/v1`, maxRetries: 0 });
  await assert.rejects(bad.models.list(), OpenAI.AuthenticationError);
  // Still serving.
  const ok = await client.chat.completions.create({ model: 'fixture', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

test('a client that disconnects mid-stream gives its pages back', async () => {
  const ac = new AbortController();
  const stream = await client.completions.create(
    // Sampled, not greedy: the fixture's greedy path can settle on ids beyond the byte tokenizer
    // (no text, so no chunks); sampling over its 512 ids gives text about every other token.
    { model: 'fixture', prompt: 'disconnect me', max_tokens: 1000, temperature: 1, seed: 11, ignore_eos: true, stream: true },
    { signal: ac.signal });
  let seen = 0, finish = null;
  // (This client version ends the iteration quietly on abort; older ones threw.)
  for await (const chunk of stream) {
    finish = chunk.choices[0]?.finish_reason ?? finish;
    if (++seen === 3) {
      const during = await scrape(server.url);
      assert.ok(metricValue(during, 'tessera_kv_cache_pages_used') > 0, 'pages in use while streaming');
      ac.abort();
      break;
    }
  }
  assert.equal(seen, 3);
  assert.equal(finish, null, 'the request was still running when the client left');
  // The access log (stderr) says the request was cut short by its client (499), well before its
  // 1000 tokens: cancelled, not merely finished. Its line can reach this process after the metrics
  // show the pages back (another pipe), so both are awaited.
  const clientClosed = () => server.stderr().split('\n').slice(0, -1)  // whole lines only
    .filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
    .filter((e) => e.path === '/v1/completions' && e.status === 499);
  const deadline = Date.now() + 10000;
  let returned = false;
  for (;;) {
    const m = await scrape(server.url);
    returned = metricValue(m, 'tessera_kv_cache_pages_used') === 0 && metricValue(m, 'tessera_num_requests_running') === 0;
    if (returned && clientClosed().length > 0) break;
    if (Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.ok(returned, 'pages were not returned after the disconnect');
  const cut = clientClosed();
  assert.equal(cut.length, 1, 'one request logged as client-closed (499)');
  assert.ok(cut[0].completion_tokens < 1000, `completion_tokens ${cut[0].completion_tokens}`);
});

test('/metrics parses as Prometheus text and counts what happened', async () => {
  const m = await scrape(server.url);
  for (const name of ['tessera_num_requests_running', 'tessera_num_requests_waiting', 'tessera_time_to_first_token_seconds',
                      'tessera_inter_token_latency_seconds', 'tessera_e2e_request_latency_seconds', 'tessera_request_queue_time_seconds',
                      'tessera_prompt_tokens_total', 'tessera_generation_tokens_total', 'tessera_prefix_cache_queries_total',
                      'tessera_prefix_cache_hits_total', 'tessera_kv_cache_pages_used', 'tessera_kv_cache_pages_total',
                      'tessera_diffusion_tokens_per_forward', 'tessera_diffusion_steps_per_block', 'tessera_moe_routed_tokens_total',
                      'tessera_request_errors_total'])
    assert.ok(m.has(name), `missing family ${name}`);
  assert.ok(metricValue(m, 'tessera_generation_tokens_total') > 0);
  assert.ok(metricValue(m, 'tessera_kv_cache_pages_total') > 0);
  assert.ok(metricValue(m, 'tessera_request_errors_total', { code: '400' }) >= 5);
  // Every routed token of layer 0 went to top-k experts: the per-expert counter is fed.
  const routed = m.get('tessera_moe_routed_tokens_total').samples.filter((s) => s.labels.layer === '0');
  assert.ok(routed.length > 0 && routed.reduce((a, s) => a + s.value, 0) > 0, 'routed tokens per expert are counted');
});

test('responses match the openai client type declarations (tsc --strict)', () => {
  assert.ok(typed.length > 10);
  const dir = fs.mkdtempSync(path.join(path.dirname(nodeModulesDir()), 'typecheck-'));
  try {
    const lines = [
      "import type { ChatCompletion, ChatCompletionChunk } from 'openai/resources/chat/completions';",
      "import type { Completion, CompletionChoice } from 'openai/resources/completions';",
      "import type { Model } from 'openai/resources/models';",
      // Streamed completion chunks carry finish_reason null until the last one (as OpenAI's API
      // does), which the client's Completion type does not spell out.
      "type CompletionChunk = Omit<Completion, 'choices'> & { choices: Array<Omit<CompletionChoice, 'finish_reason'> &",
      "  { finish_reason: CompletionChoice['finish_reason'] | null }> };",
    ];
    // Through a generic `V extends T`: the check is structural (every required field, every field's
    // type, literal types kept), and documented extensions such as /v1/models' max_model_len (vLLM
    // has it too) are not excess-property errors.
    lines.push('const conforms = <T,>() => <V extends T>(v: V): V => v;');
    typed.forEach(([type, value], i) => lines.push(`export const r${i} = conforms<${type}>()(${JSON.stringify(value)});`));
    fs.writeFileSync(path.join(dir, 'check.ts'), lines.join('\n') + '\n');
    const tsc = path.join(nodeModulesDir(), 'typescript/bin/tsc');
    try {
      execFileSync(process.execPath, [tsc, '--noEmit', '--strict', '--skipLibCheck', '--target', 'es2022', '--module', 'nodenext',
                                      '--moduleResolution', 'nodenext', path.join(dir, 'check.ts')], { encoding: 'utf8' });
    } catch (e) {
      assert.fail(`tsc rejected the responses:\n${e.stdout}${e.stderr}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
