// tessera chat page: the conversation. Sends /v1/chat/completions with stream: true and reads the
// SSE body through fetch (so it can carry the API key), appends content deltas as they arrive,
// turns delta.tool_calls into cards (tool_cards.js) and diffusion_step events into the denoising
// view (denoise.js). Settings come from the side panel; the API key lives in localStorage.
import { readSse } from './sse.js';
import { DenoiseView } from './denoise.js';
import { ToolCallCards } from './tool_cards.js';

const KEY_STORAGE = 'tessera.apiKey';
const $ = (id) => document.getElementById(id);

// Tools offered when "Offer demo tools" is on: the ones the demo model was taught to call
// (tools/demo_model/chat_data.py).
const DEMO_TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get the current weather in a city.',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', description: 'The city name, e.g. Paris' },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        },
        required: ['city'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      description: 'Get the current local time in a time zone.',
      parameters: {
        type: 'object',
        properties: { timezone: { type: 'string', description: 'IANA time zone, e.g. Europe/Paris' } },
        required: ['timezone'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'convert_units',
      description: 'Convert a value from one unit to another.',
      parameters: {
        type: 'object',
        properties: {
          value: { type: 'number' },
          from_unit: { type: 'string' },
          to_unit: { type: 'string' },
        },
        required: ['value', 'from_unit', 'to_unit'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'set_timer',
      description: 'Start a countdown timer.',
      parameters: {
        type: 'object',
        properties: { minutes: { type: 'integer' }, label: { type: 'string' } },
        required: ['minutes'],
      },
    },
  },
];

const state = {
  model: null,         // /v1/models entry
  diffusion: null,     // true / false once known, null before
  maskId: null,
  history: [],         // OpenAI messages of the conversation (without the system prompt)
  controller: null,    // AbortController of the answer being streamed
};

function apiKey() {
  return $('api-key').value.trim();
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (apiKey()) h.Authorization = `Bearer ${apiKey()}`;
  return h;
}

function setStatus(text, kind = '') {
  const s = $('server-status');
  s.textContent = text;
  s.dataset.kind = kind;
}

async function errorMessage(res) {
  const text = await res.text();
  try {
    const e = JSON.parse(text).error;
    if (e?.message) return { message: e.message, param: e.param || '', status: res.status };
  } catch { /* not JSON */ }
  return { message: `${res.status} ${res.statusText}: ${text.slice(0, 200)}`, param: '', status: res.status };
}

function setModelKind(diffusion) {
  state.diffusion = diffusion;
  const badge = $('model-kind');
  badge.textContent = diffusion === null ? '' : diffusion ? 'block diffusion' : 'autoregressive';
  $('diffusion-settings').disabled = diffusion === false;
  $('diffusion-help').textContent = diffusion === false
    ? 'This model is autoregressive: diffusion settings do not apply.'
    : "Empty fields use the model's defaults.";
}

async function loadModel() {
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    if (res.status === 401) {
      $('model-name').textContent = 'model unknown';
      setStatus('The server needs an API key: enter it in Settings.', 'warn');
      return;
    }
    if (!res.ok) throw new Error((await errorMessage(res)).message);
    const m = (await res.json()).data?.[0];
    state.model = m;
    $('model-name').textContent = m?.id || 'no model';
    setStatus('ready', 'ok');
    // A server that describes its diffusion settings lets the page know without trying.
    const d = m?.diffusion;
    if (d && typeof d === 'object') {
      setModelKind(true);
      if (Number.isInteger(d.mask_token_id)) state.maskId = d.mask_token_id;
      if (d.block_size) $('diff-block-size').placeholder = `default ${d.block_size}`;
      if (d.steps) $('diff-steps').placeholder = `default ${d.steps}`;
      if (d.policy) $('diff-policy').options[0].textContent = `default (${d.policy})`;
      if (d.threshold !== undefined) $('diff-threshold').placeholder = `default ${d.threshold}`;
    } else if (d === false || m?.kind === 'autoregressive') {
      setModelKind(false);
    }
  } catch (e) {
    setStatus(`Cannot reach the server: ${e.message}`, 'error');
  }
}

async function pollHealth() {
  try {
    const res = await fetch('/health', { cache: 'no-store' });
    const body = await res.json().catch(() => ({}));
    if (res.ok) setStatus('ready', 'ok');
    else setStatus(`server ${body.status || res.status}`, 'warn');
    if (res.ok && !state.model) loadModel();
  } catch {
    setStatus('server unreachable', 'error');
  }
  setTimeout(pollHealth, 5000);
}

function numberField(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

function requestBody(withDiffusion) {
  const messages = [];
  const sys = $('system-prompt').value.trim();
  if (sys) messages.push({ role: 'system', content: sys });
  messages.push(...state.history);
  const body = {
    model: state.model?.id,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: Number($('temperature').value),
    max_tokens: numberField('max-tokens') ?? 256,
  };
  if ($('use-tools').checked) body.tools = DEMO_TOOLS;
  if (withDiffusion) {
    const d = { stream_steps: $('show-steps').checked };
    const steps = numberField('diff-steps'), bs = numberField('diff-block-size');
    const th = numberField('diff-threshold'), policy = $('diff-policy').value;
    if (steps !== undefined) d.steps = steps;
    if (bs !== undefined) d.block_size = bs;
    if (policy) d.policy = policy;
    if (th !== undefined) d.threshold = th;
    body.diffusion = d;
  }
  return body;
}

function addMessage(role, label) {
  $('empty-hint')?.remove();
  const node = $('tpl-message').content.firstElementChild.cloneNode(true);
  node.dataset.role = role;
  node.querySelector('.who').textContent = label;
  $('log').append(node);
  node.scrollIntoView({ block: 'end', behavior: 'smooth' });
  return node;
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('prompt').setAttribute('aria-busy', String(busy));
}

async function ask() {
  const node = addMessage('assistant', 'tessera');
  node.dataset.state = 'streaming';
  node.setAttribute('aria-busy', 'true');
  const contentEl = node.querySelector('.content');
  const meta = node.querySelector('.meta');
  const cards = new ToolCallCards(node.querySelector('.tools'), sendToolResult);
  let denoise = null;
  let content = '';
  let finish = '';
  let usage = null;
  const started = performance.now();
  state.controller = new AbortController();
  setBusy(true);
  try {
    const tryDiffusion = state.diffusion !== false;
    let res = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(requestBody(tryDiffusion)),
      signal: state.controller.signal,
    });
    if (!res.ok && tryDiffusion && state.diffusion === null) {
      const err = await errorMessage(res);
      if (res.status === 400 && err.param.startsWith('diffusion')) {
        setModelKind(false);  // the server said: not a diffusion model; ask again without
        res = await fetch('/v1/chat/completions', {
          method: 'POST', headers: headers(), body: JSON.stringify(requestBody(false)),
          signal: state.controller.signal,
        });
      } else {
        throw Object.assign(new Error(err.message), { status: err.status });
      }
    }
    if (!res.ok) {
      const err = await errorMessage(res);
      throw Object.assign(new Error(err.message), { status: err.status });
    }
    await readSse(res, ({ event, data }) => {
      if (event === 'diffusion_step') {
        if (state.diffusion !== true) setModelKind(true);
        if (!denoise) {
          denoise = new DenoiseView(node.querySelector('.denoise'), {
            maskId: state.maskId, frameMs: animationMs(),
          });
        }
        denoise.push(JSON.parse(data));
        return;
      }
      if (data === '[DONE]') return;
      const j = JSON.parse(data);
      if (j.error) throw Object.assign(new Error(j.error.message || 'error'), { status: 500 });
      if (j.usage) usage = j.usage;
      const choice = j.choices?.[0];
      if (!choice) return;
      const delta = choice.delta || {};
      if (typeof delta.content === 'string' && delta.content) {
        content += delta.content;
        contentEl.textContent = content;
      }
      if (delta.tool_calls) cards.apply(delta.tool_calls);
      if (choice.finish_reason) finish = choice.finish_reason;
    });
    // A diffusion model asked for steps sends some for any non-empty answer.
    if (state.diffusion === null && $('show-steps').checked && usage?.completion_tokens > 0) setModelKind(false);
    node.dataset.state = 'done';
  } catch (e) {
    node.dataset.state = 'error';
    const p = document.createElement('p');
    p.className = 'error';
    p.setAttribute('role', 'alert');
    if (e.name === 'AbortError') p.textContent = 'Stopped.';
    else if (e.status === 401) p.textContent = `${e.message}. Enter the API key in Settings.`;
    else p.textContent = `Error: ${e.message}`;
    node.append(p);
  } finally {
    denoise?.finish();
    node.setAttribute('aria-busy', 'false');
    state.controller = null;
    setBusy(false);
  }
  const seconds = (performance.now() - started) / 1000;
  const parts = [];
  if (finish) parts.push(`finish: ${finish}`);
  if (usage) {
    parts.push(`${usage.prompt_tokens} prompt + ${usage.completion_tokens} completion tokens`);
    if (seconds > 0) parts.push(`${(usage.completion_tokens / seconds).toFixed(1)} tok/s`);
  }
  parts.push(`${seconds.toFixed(2)} s`);
  meta.textContent = parts.join(' · ');
  if (!content && cards.calls.length === 0 && node.dataset.state === 'done') contentEl.textContent = '(empty answer)';
  if (node.dataset.state === 'done' || content || cards.calls.length) {
    const msg = { role: 'assistant', content };
    if (cards.calls.length) msg.tool_calls = cards.calls;
    state.history.push(msg);
  }
}

function animationMs() {
  if (window.matchMedia?.('(prefers-reduced-motion: reduce)').matches) return 0;
  return Number($('anim-speed').value);
}

function sendToolResult(call, text) {
  if (state.controller) return;
  state.history.push({ role: 'tool', tool_call_id: call.id, content: text });
  const node = addMessage('tool', `Tool result (${call.function.name})`);
  node.querySelector('.content').textContent = text;
  ask();
}

function send(e) {
  e.preventDefault();
  const text = $('prompt').value.trim();
  if (!text || state.controller) return;
  $('prompt').value = '';
  state.history.push({ role: 'user', content: text });
  const node = addMessage('user', 'You');
  node.querySelector('.content').textContent = text;
  ask();
}

function init() {
  const key = $('api-key');
  key.value = localStorage.getItem(KEY_STORAGE) || '';
  key.addEventListener('change', () => {
    if (apiKey()) localStorage.setItem(KEY_STORAGE, apiKey());
    else localStorage.removeItem(KEY_STORAGE);
    loadModel();
  });
  $('forget-key').addEventListener('click', () => {
    key.value = '';
    localStorage.removeItem(KEY_STORAGE);
  });
  $('temperature').addEventListener('input', () => {
    $('temperature-out').value = Number($('temperature').value).toFixed(2);
  });
  $('anim-speed').addEventListener('input', () => {
    $('anim-speed-out').value = $('anim-speed').value;
  });
  $('composer').addEventListener('submit', send);
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => state.controller?.abort());
  $('clear').addEventListener('click', () => {
    state.controller?.abort();
    state.history = [];
    $('log').replaceChildren();
  });
  setModelKind(null);
  pollHealth();
  $('prompt').focus();
}

init();
