// The sampling API through the official `openai` npm client against real `tessera serve`s on the
// fixture model (tiny random qwen3_moe, the byte tokenizer: ids below 256 are their own byte): n
// choices (indices, distinct when sampled, reproducible with a seed, the prompt computed once: the
// prefix-cache counters), logit_bias forcing token 5, router_temperature, echo, the field audit's
// 400s, and the same backbone served as a block-diffusion model: n choices and logprobs equal to the
// logs of the confidences its diffusion_step events report.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, requireDep, arModel, bytesTokenizer, fixtures, scrape, metricValue } from './lib/server.mjs';

const OpenAI = requireDep('openai');
let ar, dlm, client, dclient;

before(async () => {
  ar = await startServer(['--model', arModel, '--tokenizer', bytesTokenizer, '--served-model-name', 'fixture',
                          '--max-model-len', '1024']);
  const ref = JSON.parse(fs.readFileSync(path.join(fixtures, 'diffusion/qwen3_moe/reference.json'), 'utf8'));
  dlm = await startServer(['--model', arModel, '--tokenizer', bytesTokenizer, '--served-model-name', 'fixture',
                           '--diffusion', '--mask-token-id', String(ref.mask_token_id), '--diffusion-block-size', '8',
                           '--diffusion-steps', '4', '--max-model-len', '1024']);
  client = new OpenAI({ apiKey: 'none', baseURL: `${ar.url}/v1`, maxRetries: 0 });
  dclient = new OpenAI({ apiKey: 'none', baseURL: `${dlm.url}/v1`, maxRetries: 0 });
});

after(async () => {
  if (ar) assert.equal(await ar.stop(), 0, ar.stderr());
  if (dlm) assert.equal(await dlm.stop(), 0, dlm.stderr());
});

const sampled = { temperature: 1, max_tokens: 8, ignore_eos: true };

test('n choices: indices, distinct, reproducible with a seed, the prompt computed once', async () => {
  // A prompt no other test sends: nothing of it is cached before.
  const messages = [{ role: 'user', content: 'n choices share one prefill of this rather long prompt, page after page.' }];
  const before = await scrape(ar.url);
  const r = await client.chat.completions.create({ model: 'fixture', messages, n: 4, seed: 42, ...sampled });
  const after = await scrape(ar.url);
  assert.equal(r.choices.length, 4);
  r.choices.forEach((c, i) => assert.equal(c.index, i));
  assert.equal(new Set(r.choices.map((c) => c.message.content)).size, 4, 'sampled choices differ');
  assert.equal(r.usage.completion_tokens, 4 * 8);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  // The three later choices took every full 16-token page of the prompt (but the one holding its
  // last position) from the first choice's prefill.
  const pages = Math.floor((r.usage.prompt_tokens - 1) / 16) * 16;
  assert.ok(pages >= 48, `prompt of ${r.usage.prompt_tokens} tokens`);
  const hits = metricValue(after, 'tessera_prefix_cache_hits_total') - metricValue(before, 'tessera_prefix_cache_hits_total');
  assert.equal(hits, 3 * pages);

  const again = await client.chat.completions.create({ model: 'fixture', messages, n: 4, seed: 42, ...sampled });
  assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));
  // Choice 0 uses the seed itself: it is what n = 1 gives.
  const one = await client.chat.completions.create({ model: 'fixture', messages, seed: 42, ...sampled });
  assert.equal(one.choices[0].message.content, r.choices[0].message.content);
});

test('n choices stream with their index and match the whole response', async () => {
  const req = { model: 'fixture', prompt: 'stream several choices', n: 3, seed: 7, ...sampled };
  const whole = await client.completions.create(req);
  const stream = await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const text = ['', '', ''], finish = [null, null, null];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text[c.index] += c.text;
      finish[c.index] = c.finish_reason ?? finish[c.index];
    }
  }
  assert.deepEqual(text, whole.choices.map((c) => c.text));
  assert.deepEqual(finish, ['length', 'length', 'length']);
  assert.equal(usage.completion_tokens, 3 * 8);
});

test('logit_bias {"5": 100} makes token 5 come out, greedy or sampled', async () => {
  for (const temperature of [0, 1]) {
    const r = await client.completions.create({ model: 'fixture', prompt: 'bias', max_tokens: 6, temperature, seed: 1,
                                                logit_bias: { 5: 100 }, logprobs: 0 });
    assert.equal(r.choices[0].text, '\u0005'.repeat(6));
    assert.deepEqual(r.choices[0].logprobs.tokens, Array(6).fill('\u0005'));
  }
  // -100 bans: the greedy first byte of the unbiased answer never appears.
  const plain = await client.completions.create({ model: 'fixture', prompt: 'bias', max_tokens: 6, temperature: 0 });
  const first = plain.choices[0].text.codePointAt(0);
  if (first !== undefined && first < 128) {  // ASCII: one byte, one token
    const banned = await client.completions.create({ model: 'fixture', prompt: 'bias', max_tokens: 6, temperature: 0,
                                                     logit_bias: { [first]: -100 } });
    assert.ok(!banned.choices[0].text.includes(String.fromCodePoint(first)), banned.choices[0].text);
  }
  for (const logit_bias of [{ 9999: 1 }, { x: 1 }, { 5: 200 }, { 5: 'big' }]) {
    await assert.rejects(client.completions.create({ model: 'fixture', prompt: 'bias', logit_bias }),
                         (e) => e instanceof OpenAI.BadRequestError && e.param === 'logit_bias');
  }
});

test('router_temperature: 1 is the plain model, other values change it, bad values are 400', async () => {
  const base = { model: 'fixture', prompt: 'route me through the experts', max_tokens: 6, temperature: 0, logprobs: 3 };
  const plain = await client.completions.create(base);
  const one = await client.completions.create({ ...base, router_temperature: 1 });
  const hot = await client.completions.create({ ...base, router_temperature: 0.2 });
  assert.deepEqual(one.choices[0].logprobs, plain.choices[0].logprobs);
  assert.notDeepEqual(hot.choices[0].logprobs.token_logprobs, plain.choices[0].logprobs.token_logprobs);
  for (const router_temperature of [0, 0.01, 21, 'hot'])
    await assert.rejects(client.completions.create({ ...base, router_temperature }),
                         (e) => e instanceof OpenAI.BadRequestError && e.param === 'router_temperature');
});

test('echo, best_of and fields the server does not know', async () => {
  const r = await client.completions.create({ model: 'fixture', prompt: 'echo: ', max_tokens: 4, temperature: 0, echo: true });
  assert.ok(r.choices[0].text.startsWith('echo: '), r.choices[0].text);
  const cases = [
    [{ best_of: 2 }, 'best_of'], [{ n: 2, best_of: 1 }, 'best_of'], [{ n: 17 }, 'n'], [{ suffix: 'end' }, 'suffix'],
    [{ guided_regex: 'a+' }, 'guided_regex'], [{ echo: true, logprobs: 1 }, 'echo'],
  ];
  for (const [extra, param] of cases)
    await assert.rejects(client.completions.create({ model: 'fixture', prompt: 'x', max_tokens: 2, ...extra }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, param);
      return true;
    });
  await assert.rejects(
    client.chat.completions.create({ model: 'fixture', messages: [{ role: 'user', content: 'x' }], reasoning_effort: 'low' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'reasoning_effort');
  // Metadata fields are accepted.
  const ok = await client.chat.completions.create({ model: 'fixture', messages: [{ role: 'user', content: 'x' }], max_tokens: 2,
                                                    user: 'u', metadata: { team: 'a' }, store: false, service_tier: 'auto' });
  assert.equal(ok.choices.length, 1);
});

test('diffusion: n choices and logprobs that are the logs of the unmasking confidences', async () => {
  const messages = [{ role: 'user', content: 'diffuse a few choices' }];
  const req = { model: 'fixture', messages, n: 2, seed: 3, temperature: 1, max_tokens: 16, ignore_eos: true };
  const r = await dclient.chat.completions.create(req);
  assert.equal(r.choices.length, 2);
  assert.notEqual(r.choices[0].message.content, r.choices[1].message.content);
  const again = await dclient.chat.completions.create(req);
  assert.deepEqual(again.choices.map((c) => c.message.content), r.choices.map((c) => c.message.content));

  // Raw SSE: the diffusion_step events (an extension the client does not surface) and the logprobs.
  const res = await fetch(`${dlm.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'fixture', messages, max_tokens: 16, temperature: 0, ignore_eos: true, logprobs: true,
                           stream: true, stream_options: { include_usage: true }, diffusion: { stream_steps: true } }),
  });
  assert.equal(res.status, 200);
  const conf = new Map();
  const logprobs = [];
  let usage = null;
  for (const block of (await res.text()).split('\n\n')) {
    if (!block) continue;
    const step = block.startsWith('event: diffusion_step\n');
    const data = block.slice(block.indexOf('data: ') + 6);
    if (data === '[DONE]') continue;
    const j = JSON.parse(data);
    if (step) j.unmasked.forEach((pos, k) => conf.set(pos, j.conf[k]));
    else if (j.usage) usage = j.usage;
    else for (const c of j.choices) logprobs.push(...(c.logprobs?.content ?? []).map((e) => e.logprob));
  }
  assert.equal(logprobs.length, 16);
  logprobs.forEach((lp, i) => {
    const c = conf.get(usage.prompt_tokens + i);
    assert.ok(c > 0, `position ${usage.prompt_tokens + i} was unmasked`);
    assert.ok(Math.abs(lp - Math.log(c)) < 1e-5, `token ${i}: logprob ${lp}, confidence ${c}`);
  });
  await assert.rejects(dclient.chat.completions.create({ model: 'fixture', messages, logprobs: true, top_logprobs: 2 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_logprobs');
});
