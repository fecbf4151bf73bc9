// tessera tests: the chat page in headless Chromium against a real `tessera serve` on the tiny
// block-diffusion fixture (byte tokenizer, random weights: the text is noise, every stage is real).
// Loads /, enters the API key, sends a message, waits for the streamed answer and checks the
// denoising view played the server's diffusion_step events (masks drawn, then filled); saves
// screenshots (mid-denoising and final) as test artifacts and prints their paths. Also: the page's
// SSE parser on hand-made streams, tool-call cards on a canned stream, and the metric names of
// deploy/ (dashboard, alerts, autoscaler) against the running server's /metrics.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const BIN = process.env.TESSERA_BIN;
const SRC = process.env.TESSERA_SOURCE_DIR;
const NODE_MODULES = process.env.TESSERA_NODE_MODULES;
const CHROMIUM = process.env.TESSERA_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.TESSERA_ARTIFACT_DIR || path.join(path.dirname(BIN || '.'), 'test-artifacts');
const API_KEY = 'sk-chat-page-test';

let server = null;  // {proc, url, log}

// The diffusion fixture: the qwen3_moe checkpoint served as a block-diffusion model, with the mask
// token of the fixture's reference.json (as tests/unit/cli_test.cpp runs it), blocks of 8, 4 steps.
function diffusionModelArgs() {
  const fixture = path.join(SRC, 'tests/data/fixtures/diffusion/qwen3_moe');
  const ref = JSON.parse(fs.readFileSync(path.join(fixture, 'reference.json'), 'utf8'));
  return ['--model', path.join(SRC, 'tests/data/fixtures/models/qwen3_moe'), '--diffusion',
    '--mask-token-id', String(ref.mask_token_id), '--diffusion-block-size', '8', '--diffusion-steps', '4'];
}

function startServer(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, ['serve', '--host', '127.0.0.1', '--port', '0', ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let log = '';
    const timer = setTimeout(() => reject(new Error(`no listening line in 60 s; stderr:\n${log}`)), 60000);
    proc.stderr.on('data', (d) => { log += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/tessera: listening on (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], get log() { return log; } });
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`tessera serve exited with ${code} before listening; stderr:\n${log}`));
    });
  });
}

async function waitHealthy(url, seconds) {
  const end = Date.now() + seconds * 1000;
  let last = '';
  while (Date.now() < end) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) return;
      last = `${r.status} ${await r.text()}`;
    } catch (e) {
      last = e.message;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`/health not 200 after ${seconds} s (last: ${last}); server log:\n${server?.log}`);
}

function stopServer() {
  if (!server || server.proc.exitCode !== null) return Promise.resolve();
  const { proc } = server;
  return new Promise((resolve) => {
    const kill = setTimeout(() => proc.kill('SIGKILL'), 15000);
    proc.on('exit', () => { clearTimeout(kill); resolve(); });
    proc.kill('SIGTERM');
  });
}
process.on('exit', () => { if (server && server.proc.exitCode === null) server.proc.kill('SIGKILL'); });

before(async () => {
  assert.ok(BIN && SRC && NODE_MODULES, 'TESSERA_BIN, TESSERA_SOURCE_DIR and TESSERA_NODE_MODULES must be set (ctest does)');
  server = await startServer([
    ...diffusionModelArgs(),
    '--tokenizer', path.join(SRC, 'tests/data/fixtures/tokenizers/bytes'),
    '--served-model-name', 'qwen3_moe-diffusion',
    '--api-key', API_KEY,
    '--kv-cache-memory', '64MiB',
  ]);
  await waitHealthy(server.url, 300);
});

after(async () => {
  await stopServer();
});

test('SSE parser: fields, comments, CRLF and chunks split anywhere', async () => {
  const { createSseParser } = await import(pathToFileURL(path.join(SRC, 'web/sse.js')).href);
  const stream = ': comment\r\nevent: diffusion_step\r\ndata: {"a":1}\r\n\r\n' +
    'data: first\ndata: second\n\n' + 'data:no-space\r\rdata: [DONE]\n\n' + 'data: unterminated';
  const want = [
    { event: 'diffusion_step', data: '{"a":1}' },
    { event: 'message', data: 'first\nsecond' },
    { event: 'message', data: 'no-space' },
    { event: 'message', data: '[DONE]' },
  ];
  for (const size of [1, 2, 3, 7, stream.length]) {
    const got = [];
    const p = createSseParser((e) => got.push(e));
    for (let i = 0; i < stream.length; i += size) p.push(stream.slice(i, i + size));
    p.end();
    assert.deepEqual(got, want, `chunks of ${size}`);
  }
});

test('chat page streams an answer and animates the denoising', async () => {
  if (!fs.existsSync(CHROMIUM)) {
    assert.fail(`Chromium not found at ${CHROMIUM}: install Debian's chromium package ` +
      '(scripts/install_deps.sh does) or set TESSERA_CHROMIUM');
  }
  const require = createRequire(NODE_MODULES + '/');
  const { chromium } = require('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
    page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()}`));
    const res = await page.goto(server.url + '/');
    assert.equal(res.status(), 200);
    assert.match(await page.title(), /tessera/);

    // Without a key the API refuses; the page says so. With it, the model appears.
    await page.locator('#server-status', { hasText: 'API key' }).waitFor({ timeout: 20000 });
    problems.length = 0;  // the 401 of /v1/models is logged by the browser: expected here
    await page.fill('#api-key', API_KEY);
    await page.dispatchEvent('#api-key', 'change');
    await page.locator('#model-name', { hasText: 'qwen3_moe' }).waitFor({ timeout: 20000 });
    assert.equal(await page.evaluate(() => localStorage.getItem('tessera.apiKey')), API_KEY);

    await page.fill('#max-tokens', '24');
    await page.fill('#diff-steps', '4');
    // Slow playback, so that a frame with masks still in it can be caught and photographed.
    await page.$eval('#anim-speed', (e) => { e.value = '300'; e.dispatchEvent(new Event('input')); });
    await page.fill('#prompt', 'Hello! What can you do?');
    await page.press('#prompt', 'Enter');
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await page.locator('.msg[data-role="assistant"] .block .cell[data-state="masked"]').first()
      .waitFor({ timeout: 300000 });
    const midShot = path.join(ARTIFACTS, 'chat_page_denoising.png');
    await page.screenshot({ path: midShot, fullPage: true });
    console.log(`screenshot (mid-denoising): ${midShot}`);

    const answer = page.locator('.msg[data-role="assistant"]').last();
    await page.waitForFunction(() => {
      const a = [...document.querySelectorAll('.msg[data-role="assistant"]')].pop();
      return a && (a.dataset.state === 'done' || a.dataset.state === 'error');
    }, null, { timeout: 300000 });
    const state = await answer.getAttribute('data-state');
    assert.equal(state, 'done', `the answer failed: ${await answer.innerText()}`);
    assert.match(await answer.locator('.meta').innerText(), /completion tokens/);
    const completion = Number((await answer.locator('.meta').innerText()).match(/(\d+) completion tokens/)[1]);
    assert.ok(completion > 0, 'no completion tokens');
    assert.equal(await page.locator('#model-kind').innerText(), 'block diffusion');

    // The denoising view: steps arrived, all were shown, masks were drawn, the last frame is full.
    const view = answer.locator('.denoise');
    await page.waitForFunction(() => {
      const v = [...document.querySelectorAll('.msg[data-role="assistant"] .denoise')].pop();
      return v && v.dataset.state === 'done';
    }, null, { timeout: 60000 });
    const received = Number(await view.getAttribute('data-steps-received'));
    const shown = Number(await view.getAttribute('data-steps-shown'));
    assert.ok(received >= 4, `only ${received} diffusion_step events`);
    assert.equal(shown, received);
    const blocks = await view.locator('.block').count();
    assert.ok(blocks >= 1);
    assert.ok(await view.locator('.block .cell').count() >= 8);
    assert.match(await view.locator('.block-caption').first().innerText(), /complete/);

    const shot = path.join(ARTIFACTS, 'chat_page.png');
    await page.screenshot({ path: shot, fullPage: true });
    assert.ok(fs.statSync(shot).size > 10000);
    console.log(`screenshot: ${shot}`);
    assert.deepEqual(problems, []);
  } finally {
    await browser.close();
  }
});

test('tool calls become cards and their results go back as tool messages', async () => {
  // The fixture model cannot call tools (random weights): the API answer is a canned OpenAI-style
  // stream (tool call name first, arguments in two pieces), served by the browser's request
  // interception; the page and its key come from the real server.
  if (!fs.existsSync(CHROMIUM)) assert.fail(`Chromium not found at ${CHROMIUM}`);
  const require = createRequire(NODE_MODULES + '/');
  const { chromium } = require('playwright-core');
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage();
    const bodies = [];
    const chunk = (delta, finish = null) => `data: ${JSON.stringify({
      id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm',
      choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    await page.route('**/v1/chat/completions', async (route) => {
      const body = route.request().postDataJSON();
      bodies.push(body);
      const sse = bodies.length === 1
        ? chunk({ role: 'assistant', content: '' }) +
          chunk({ tool_calls: [{ index: 0, id: 'call_7', type: 'function',
            function: { name: 'get_weather', arguments: '' } }] }) +
          chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city": "Lis' } }] }) +
          chunk({ tool_calls: [{ index: 0, function: { arguments: 'bon", "unit": "celsius"}' } }] }) +
          chunk({}, 'tool_calls') + 'data: [DONE]\n\n'
        : chunk({ role: 'assistant', content: '' }) + chunk({ content: 'It is sunny in Lisbon.' }) +
          chunk({}, 'stop') + 'data: [DONE]\n\n';
      await route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body: sse });
    });
    await page.addInitScript((key) => localStorage.setItem('tessera.apiKey', key), API_KEY);
    await page.goto(server.url + '/');
    await page.locator('#model-name', { hasText: 'qwen3_moe' }).waitFor({ timeout: 20000 });
    await page.check('#use-tools');
    await page.fill('#prompt', 'Weather in Lisbon?');
    await page.click('#send');
    const card = page.locator('.tool-card');
    await card.waitFor({ timeout: 20000 });
    assert.equal(await card.locator('.tool-name').innerText(), 'get_weather');
    assert.equal(await card.locator('.tool-args').innerText(),
      JSON.stringify({ city: 'Lisbon', unit: 'celsius' }, null, 2));
    assert.deepEqual(bodies[0].tools.map((t) => t.function.name),
      ['get_weather', 'get_time', 'convert_units', 'set_timer']);
    assert.equal(bodies[0].stream, true);
    assert.deepEqual(bodies[0].stream_options, { include_usage: true });

    await card.locator('input').fill('{"temperature_c": 24}');
    await card.locator('button').click();
    await page.locator('.msg[data-role="assistant"] .content', { hasText: 'sunny in Lisbon' }).waitFor({ timeout: 20000 });
    const msgs = bodies[1].messages;
    assert.deepEqual(msgs.at(-2), { role: 'assistant', content: '', tool_calls: [{ id: 'call_7', type: 'function',
      function: { name: 'get_weather', arguments: '{"city": "Lisbon", "unit": "celsius"}' } }] });
    assert.deepEqual(msgs.at(-1), { role: 'tool', tool_call_id: 'call_7', content: '{"temperature_c": 24}' });
  } finally {
    await browser.close();
  }
});

test('metric names of deploy/ exist on /metrics', async () => {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const families = new Map();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) families.set(m[1], m[2]);
  assert.ok(families.size >= 10);
  const files = ['grafana/dashboards/tessera.json', 'prometheus/alerts.yaml', 'k8s/hpa.yaml',
    'k8s/prometheus-adapter-rules.yaml'];
  let used = 0;
  for (const f of files) {
    const body = fs.readFileSync(path.join(SRC, 'deploy', f), 'utf8');
    for (const [name] of body.matchAll(/\btessera_[a-z0-9_]*[a-z0-9]/g)) {
      const base = name.replace(/_(bucket|sum|count)$/, '');
      const known = families.has(name) || families.get(base) === 'histogram';
      assert.ok(known, `${f} uses ${name}, which the server does not export`);
      used++;
    }
  }
  assert.ok(used >= 20);
  // The page was served and the diffusion request counted.
  assert.match(text, /tessera_http_requests_total\{path="\/",code="200"\} [1-9]/);
  assert.match(text, /tessera_diffusion_steps_per_block_count [1-9]/);
});
