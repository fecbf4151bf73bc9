// Operational behaviour of a real `tessera serve`: API keys (flag, file, environment), rate limits
// and the concurrency cap (429 + Retry-After), the body limit (413), SIGTERM during a stream (the
// stream completes, exit code 0), /health before and after readiness, --check-config masking.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, requireDep, arModel, bytesTokenizer, sanitized } from './lib/server.mjs';

const OpenAI = requireDep('openai');
const base = ['--model', arModel, '--tokenizer', bytesTokenizer, '--served-model-name', 'fixture'];
const post = (url, body, key, extraHeaders = {}) =>
  fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...extraHeaders },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
const small = { model: 'fixture', prompt: 'hi', max_tokens: 2 };
// The long streams below run past the requests and the signal sent while they stream; under the
// sanitizers (ASan + UBSan build), where a token takes ~15-20 ms, 3000 and 1500 tokens took 64 s and
// 21 s to drain, so there they are 10 times shorter (still seconds past what is sent meanwhile).
const longTokens = (n) => (sanitized ? n / 10 : n);

test('API keys from --api-key, --api-key-file and TESSERA_API_KEY; /health open', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-keys-'));
  const file = path.join(dir, 'keys.txt');
  fs.writeFileSync(file, '# operators\nsk-from-file\n');
  const s = await startServer([...base, '--api-key', 'sk-flag', '--api-key-file', file], { env: { TESSERA_API_KEY: 'sk-env' } });
  try {
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
    assert.equal((await post(s.url, small)).status, 401);
    const wrong = await post(s.url, small, 'sk-wrong');
    assert.equal(wrong.status, 401);
    assert.equal((await wrong.json()).error.type, 'invalid_request_error');
    for (const key of ['sk-flag', 'sk-from-file', 'sk-env']) assert.equal((await post(s.url, small, key)).status, 200, key);
    // The key never shows in the effective configuration printed at start.
    assert.ok(!s.stderr().includes('sk-flag'));
  } finally {
    assert.equal(await s.stop(), 0, s.stderr());
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('requests per minute: 429 with Retry-After, then other keys still served', async () => {
  const s = await startServer([...base, '--api-key', 'sk-a', '--api-key', 'sk-b', '--requests-per-minute', '2']);
  try {
    assert.equal((await post(s.url, small, 'sk-a')).status, 200);
    assert.equal((await post(s.url, small, 'sk-a')).status, 200);
    const limited = await post(s.url, small, 'sk-a');
    assert.equal(limited.status, 429);
    const retry = Number(limited.headers.get('retry-after'));
    assert.ok(retry >= 1 && retry <= 60, `Retry-After ${retry}`);
    assert.equal((await limited.json()).error.type, 'rate_limit_error');
    assert.equal((await post(s.url, small, 'sk-b')).status, 200);
  } finally {
    assert.equal(await s.stop(), 0, s.stderr());
  }
});

test('concurrency cap with a bounded queue: 429 with Retry-After beyond it', async () => {
  const s = await startServer([...base, '--max-concurrent-requests', '1', '--max-queue', '0']);
  try {
    const c = new OpenAI({ apiKey: 'none', baseURL: `${s.url}/v1`, maxRetries: 0 });
    // Long enough to still run when the next requests arrive; sampled so that it streams text (see
    // openai_client.test.mjs on the fixture's greedy path).
    const long = await c.completions.create({ model: 'fixture', prompt: 'long', max_tokens: longTokens(3000), temperature: 1, seed: 5,
                                              ignore_eos: true, stream: true });
    const it = long[Symbol.asyncIterator]();
    await it.next();  // the long request holds the only slot
    const refused = await post(s.url, small);
    assert.equal(refused.status, 429);
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    await assert.rejects(c.completions.create(small), OpenAI.RateLimitError);
    for (let r = await it.next(); !r.done; r = await it.next());
    assert.equal((await post(s.url, small)).status, 200);
  } finally {
    assert.equal(await s.stop(), 0, s.stderr());
  }
});

test('413 on an oversized body, then serving goes on', async () => {
  const s = await startServer([...base, '--max-body-bytes', '4096']);
  try {
    const r = await post(s.url, { ...small, prompt: 'x'.repeat(8000) });
    assert.equal(r.status, 413);
    assert.equal((await post(s.url, small)).status, 200);
  } finally {
    assert.equal(await s.stop(), 0, s.stderr());
  }
});

test('SIGTERM during a stream: the stream completes and the process exits 0', async () => {
  const s = await startServer([...base, '--drain-timeout', '60']);
  const c = new OpenAI({ apiKey: 'none', baseURL: `${s.url}/v1`, maxRetries: 0 });
  const stream = await c.completions.create({ model: 'fixture', prompt: 'drain', max_tokens: longTokens(1500), ignore_eos: true, temperature: 1,
                                              seed: 3, stream: true });
  let chunks = 0, finish = null, afterSignal = 0, signalled = false;
  for await (const chunk of stream) {
    if (signalled) afterSignal++;
    if (++chunks === 2) {
      s.proc.kill('SIGTERM');
      signalled = true;
      // Draining: new connections are refused (the listener is closed); a kept-alive one hears 503.
      await new Promise((r) => setTimeout(r, 100));
      const h = await fetch(`${s.url}/health`).catch(() => null);
      if (h) {
        assert.equal(h.status, 503);
        assert.equal((await h.json()).status, 'draining');
      }
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'length');
  assert.ok(afterSignal > 10, `chunks after SIGTERM: ${afterSignal}`);
  assert.equal(await s.exited, 0, s.stderr());
});

test('--check-config prints the effective configuration with keys masked', () => {
  const out = execFileSync(process.env.TESSERA_BIN, ['serve', ...base, '--api-key', 'sk-secret', '--check-config'], { encoding: 'utf8' });
  assert.match(out, /security\.api_keys: \*\*\*/);
  assert.ok(!out.includes('sk-secret'));
  assert.match(out, /server\.port: 8000/);
  // Unknown keys in a config file are errors (exit 2, one line naming the key).
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-cfg-'));
  const cfg = path.join(dir, 'c.yaml');
  fs.writeFileSync(cfg, 'server:\n  port: 1234\n  colour: blue\n');
  try {
    execFileSync(process.env.TESSERA_BIN, ['serve', ...base, '--config', cfg, '--check-config'], { encoding: 'utf8', stdio: 'pipe' });
    assert.fail('an unknown key was accepted');
  } catch (e) {
    assert.equal(e.status, 2, String(e.stderr));
    assert.match(String(e.stderr), /server\.colour/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('--tensor-parallel-size 2 (simulated ranks on the CPU) serves the same greedy text as 1', async () => {
  const texts = [];
  for (const tp of ['1', '2']) {
    const s = await startServer([...base, '--tensor-parallel-size', tp]);
    try {
      const r = await post(s.url, { model: 'fixture', prompt: 'tensor parallel', max_tokens: 24, temperature: 0, ignore_eos: true });
      assert.equal(r.status, 200);
      texts.push((await r.json()).choices[0].text);
    } finally {
      assert.equal(await s.stop(), 0, s.stderr());
    }
  }
  assert.ok(texts[0].length > 0);
  assert.equal(texts[1], texts[0]);
});

test('a tokenizer that does not match the model: 400 before any stream starts', async () => {
  // The Qwen3 tokenizer's template ids (151644...) lie outside the fixture's 512-row vocabulary.
  const qwen3 = path.join(process.env.TESSERA_SOURCE_DIR ?? '.', 'build-data/npm/tokenizer-qwen3');
  assert.ok(fs.existsSync(path.join(qwen3, 'tokenizer.json')), 'scripts/fetch_test_data.sh fetches the Qwen3 tokenizer');
  const s = await startServer(['--model', base[1], '--tokenizer', qwen3, '--served-model-name', 'fixture']);
  try {
    const r = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fixture', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(r.status, 400);
    assert.match((await r.json()).error.message, /outside the model's vocabulary/);
  } finally {
    assert.equal(await s.stop(), 0, s.stderr());
  }
});
