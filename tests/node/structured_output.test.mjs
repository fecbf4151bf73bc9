// Structured output through the official `openai` npm client against real `tessera serve`s on the
// fixture model (tiny random qwen3_moe, the byte tokenizer): the model's output is noise, so every
// structure below comes from the grammar. The client's structured-output helper
// `chat.completions.parse` (response_format json_schema -> message.parsed; strict function tools ->
// tool_calls[].function.parsed_arguments), json_object, vLLM's structured_outputs (choice, regex),
// the 400s, and the same on the backbone served as a block-diffusion model. zod is not among the
// pinned packages (scripts/fetch_test_data.sh), so the schemas are written out as JSON Schema, which
// is what the zod helper would send.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, requireDep, arModel, bytesTokenizer, fixtures, sanitized } from './lib/server.mjs';

const OpenAI = requireDep('openai');
let ar, dlm, clients;

before(async () => {
  ar = await startServer(['--model', arModel, '--tokenizer', bytesTokenizer, '--served-model-name', 'fixture',
                          '--max-model-len', '4096']);
  const ref = JSON.parse(fs.readFileSync(path.join(fixtures, 'diffusion/qwen3_moe/reference.json'), 'utf8'));
  dlm = await startServer(['--model', arModel, '--tokenizer', bytesTokenizer, '--served-model-name', 'fixture',
                           '--diffusion', '--mask-token-id', String(ref.mask_token_id), '--diffusion-block-size', '8',
                           '--diffusion-steps', '4', '--max-model-len', '4096']);
  clients = {
    ar: new OpenAI({ apiKey: 'none', baseURL: `${ar.url}/v1`, maxRetries: 0 }),
    diffusion: new OpenAI({ apiKey: 'none', baseURL: `${dlm.url}/v1`, maxRetries: 0 }),
  };
});

after(async () => {
  if (ar) assert.equal(await ar.stop(), 0, ar.stderr());
  if (dlm) assert.equal(await dlm.stop(), 0, dlm.stderr());
});

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 130 },
    role: { enum: ['admin', 'user', 'guest'] },
    tags: { type: 'array', items: { type: 'string', pattern: '^[a-z]{1,5}$' }, maxItems: 3 },
  },
  required: ['name', 'age', 'role', 'tags'],
  additionalProperties: false,
};

function checkPerson(p) {
  assert.deepEqual(Object.keys(p), ['name', 'age', 'role', 'tags']);
  assert.equal(typeof p.name, 'string');
  assert.ok([...p.name].length <= 12);
  assert.ok(Number.isInteger(p.age) && p.age >= 0 && p.age <= 130, String(p.age));
  assert.ok(['admin', 'user', 'guest'].includes(p.role));
  assert.ok(Array.isArray(p.tags) && p.tags.length <= 3);
  for (const t of p.tags) assert.match(t, /^[a-z]{1,5}$/);
}

const messages = [{ role: 'user', content: 'Describe a person as JSON.' }];
const sampled = { temperature: 1, max_tokens: 2000 };

for (const kind of ['ar', 'diffusion']) {
  test(`${kind}: parse() with a json_schema response_format gives a valid parsed object`, async () => {
    for (const seed of [1, 2, 3]) {
      const r = await clients[kind].chat.completions.parse({
        model: 'fixture', messages, seed, ...sampled,
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', c.message.content);
      checkPerson(c.message.parsed);
    }
  });

  test(`${kind}: a strict tool forced by name: parsed_arguments match its schema`, async () => {
    const tools = [{ type: 'function', function: { name: 'save_person', parameters: person, strict: true } }];
    const r = await clients[kind].chat.completions.parse({
      model: 'fixture', messages, seed: 9, ...sampled, tools,
      tool_choice: { type: 'function', function: { name: 'save_person' } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, 'save_person');
    checkPerson(c.message.tool_calls[0].function.parsed_arguments);
  });

  test(`${kind}: json_object, choice and regex, streamed too`, async () => {
    // Under the sanitizers the block-diffusion server leaves out json_object: there the noise kept
    // this object open for 1126 tokens, 47 s of the file's 90 s alone (315 s in CI's 2-core run).
    // json_object on the autoregressive server, and block diffusion constrained by a JSON Schema
    // (parse() above) and by the choice and the streamed regex below, still run there; the release
    // build runs it too.
    if (kind === 'diffusion' && sanitized) {
      console.log('json_object on the block-diffusion server: release build only (see the comment)');
    } else {
      const obj = await clients[kind].chat.completions.create({
        model: 'fixture', messages, seed: 4, ...sampled, response_format: { type: 'json_object' },
      });
      const parsed = JSON.parse(obj.choices[0].message.content);
      assert.ok(parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed));
    }
    const choice = await clients[kind].completions.create({
      model: 'fixture', prompt: 'Pick one:', seed: 5, ...sampled,
      structured_outputs: { choice: ['alpha', 'beta', 'gamma delta'] },
    });
    assert.ok(['alpha', 'beta', 'gamma delta'].includes(choice.choices[0].text), choice.choices[0].text);
    const stream = await clients[kind].chat.completions.create({
      model: 'fixture', messages, seed: 6, ...sampled, stream: true,
      structured_outputs: { regex: '[0-9]{3}-[A-Z]{2,4}' },
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    assert.match(text, /^[0-9]{3}-[A-Z]{2,4}$/);
  });
}

test('bad schemas and fields are 400s naming the param', async () => {
  const cases = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', multipleOf: 2 } } } },
     'response_format.json_schema.schema', /multipleOf/],
    [{ structured_outputs: { regex: '(?<=a)b' } }, 'structured_outputs.regex', /lookbehind|not supported/],
    [{ structured_outputs: { choice: [] } }, 'structured_outputs.choice', /non-empty/],
    [{ response_format: { type: 'yaml' } }, 'response_format.type', /yaml/],
  ];
  for (const [extra, param, says] of cases) {
    await assert.rejects(clients.ar.chat.completions.create({ model: 'fixture', messages, ...extra }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, param, e.message);
      assert.match(e.message, says);
      return true;
    });
  }
});
