// Continuous batching must never change a greedy result: 64 concurrent streaming requests give,
// token for token, what each gives alone (16 under the sanitizers, see N). Autoregressive fixture
// model, then the same backbone served as a block-diffusion model (--diffusion). Text is compared:
// the byte tokenizer maps every token to its own byte, so equal text is equal tokens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, requireDep, arModel, bytesTokenizer, scrape, metricValue, sanitized } from './lib/server.mjs';

const OpenAI = requireDep('openai');
// Under the sanitizers (ASan + UBSan build) 16 requests, not 64: there the 64 requests one at a time
// and then together took 60 s alone and up to 4 minutes in CI's ctest -j2 run. 16 still fill a
// batch (at least 8 seen running together) through the same server paths (SSE streams, scheduler,
// sampler, page pool); the release build keeps 64.
const N = sanitized ? 16 : 64;

// Prompts of different lengths and contents, so sequences sit at different positions in a batch.
const prompts = Array.from({ length: N }, (_, i) => `request ${i}: ${'abcdefghij'.slice(0, 1 + (i % 10)).repeat(1 + (i % 4))}`);

async function streamText(client, prompt, extra) {
  const stream = await client.completions.create({ model: 'fixture', prompt, temperature: 0, stream: true, ...extra });
  let text = '', finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.ok(finish, 'the stream ended with a finish_reason');
  return text;
}

async function checkBatchingInvariance(args, extra) {
  // Alone: a server that runs one sequence at a time.
  const solo = await startServer([...args, '--max-num-seqs', '1']);
  const alone = [];
  try {
    const c = new OpenAI({ apiKey: 'none', baseURL: `${solo.url}/v1`, maxRetries: 0 });
    for (const p of prompts) alone.push(await streamText(c, p, extra));
  } finally {
    assert.equal(await solo.stop(), 0, solo.stderr());
  }
  // Together: all N at once in one server batching them. With the watcher's scrape that is N + 1
  // connections from one address: no per-client cap (the default, said here so it stays so).
  const batched = await startServer([...args, '--max-num-seqs', String(N), '--max-connections-per-client', '0']);
  try {
    const c = new OpenAI({ apiKey: 'none', baseURL: `${batched.url}/v1`, maxRetries: 0 });
    // Watch the running batch while the requests run: they must really share forwards.
    let maxRunning = 0, watching = true;
    const watcher = (async () => {
      while (watching) {
        const m = await scrape(batched.url);
        maxRunning = Math.max(maxRunning, metricValue(m, 'tessera_num_requests_running'));
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const together = await Promise.all(prompts.map((p) => streamText(c, p, extra)));
    watching = false;
    await watcher;
    console.log(`most requests seen running together: ${maxRunning}`);
    assert.ok(maxRunning >= 8, `requests seen running together: ${maxRunning}`);
    let same = 0;
    together.forEach((t, i) => { if (t === alone[i]) same++; });
    assert.equal(same, N, `requests equal to their single-request output: ${same}/${N}`);
    assert.ok(alone.some((t) => t.length > 0), 'the model produced text');
  } finally {
    assert.equal(await batched.stop(), 0, batched.stderr());
  }
}

test(`${N} concurrent streaming greedy requests equal their single-request outputs (autoregressive)`, async () => {
  await checkBatchingInvariance(['--model', arModel, '--tokenizer', bytesTokenizer, '--served-model-name', 'fixture'],
                                { max_tokens: 96, ignore_eos: true });  // long enough for /metrics to see the batch
});

test(`${N} concurrent streaming greedy requests equal their single-request outputs (block diffusion)`, async () => {
  await checkBatchingInvariance(['--model', arModel, '--tokenizer', bytesTokenizer, '--served-model-name', 'fixture',
                                 '--diffusion', '--diffusion-block-size', '8', '--diffusion-steps', '4'],
                                { max_tokens: 48, ignore_eos: true });
});
