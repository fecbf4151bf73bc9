// Test helpers for the node tests: start a real `tessera serve` on an ephemeral port, wait for it
// to be ready, stop it with SIGTERM; load npm packages from build-data/node; parse Prometheus text.
// Environment (set by ctest, see CMakeLists.txt): TESSERA_BIN, TESSERA_SOURCE_DIR, TESSERA_NODE_MODULES,
// TESSERA_SANITIZED.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import fs from 'node:fs';

export const sourceDir = process.env.TESSERA_SOURCE_DIR ?? path.resolve(import.meta.dirname, '../../..');
export const fixtures = path.join(sourceDir, 'tests/data/fixtures');
export const arModel = path.join(fixtures, 'models/qwen3_moe');
export const bytesTokenizer = path.join(fixtures, 'tokenizers/bytes');
// True in the AddressSanitizer + UBSan build (CMakeLists.txt sets TESSERA_SANITIZED=1 for the node
// tests there): `tessera serve` runs several times slower, and a test may take a smaller sample of
// its workload, saying what and why where it does; the release build runs all of it.
export const sanitized = process.env.TESSERA_SANITIZED === '1';

// An npm package of build-data/node (scripts/fetch_test_data.sh installs them); a clear failure
// when they are missing rather than a skip: CI installs them.
export function requireDep(name) {
  const dir = process.env.TESSERA_NODE_MODULES ?? path.join(sourceDir, 'build-data/node/node_modules');
  if (!fs.existsSync(path.join(dir, name)))
    throw new Error(`npm package '${name}' is missing from ${dir}: run scripts/fetch_test_data.sh`);
  return createRequire(path.join(dir, 'noop.js'))(name);
}
export const nodeModulesDir = () =>
  process.env.TESSERA_NODE_MODULES ?? path.join(sourceDir, 'build-data/node/node_modules');

function tesseraBin() {
  const bin = process.env.TESSERA_BIN;
  if (!bin || !fs.existsSync(bin)) throw new Error(`TESSERA_BIN (${bin}) is not the tessera binary`);
  return bin;
}

// A running server: {url, port, proc, stderr(), stop(signal) -> exit code}.
export async function startServer(args, { env = {}, readyTimeoutMs = 120000 } = {}) {
  const proc = spawn(tesseraBin(), ['serve', '--port', '0', '--compute-threads', '1', ...args], {
    env: { ...process.env, TESSERA_LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '', stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? 128 + (signal ? 15 : 0))));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line in time; stderr:\n${stderr}`)), readyTimeoutMs);
    proc.stdout.on('data', (d) => {
      stdout += d;
      const m = stdout.match(/tessera: listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    exited.then((code) => { clearTimeout(timer); reject(new Error(`tessera serve exited ${code}: ${stderr}`)); });
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    const r = await fetch(`${url}/health`).catch(() => null);
    if (r && r.status === 200) break;
    if (r && r.status !== 503) throw new Error(`/health answered ${r.status}`);
    if (Date.now() > deadline) throw new Error(`server not ready in time; stderr:\n${stderr}`);
    await new Promise((res) => setTimeout(res, 50));
  }
  let exitCode = null;
  return {
    url, port, proc, exited,
    stderr: () => stderr,
    async stop(signal = 'SIGTERM') {
      if (exitCode !== null) return exitCode;
      proc.kill(signal);
      exitCode = await exited;
      return exitCode;
    },
  };
}

// Prometheus text exposition format 0.0.4, parsed strictly: every sample line must be
// `name{labels} value [timestamp]`, every family declared by # TYPE before its samples, names and
// label names valid, label values properly escaped, histogram buckets cumulative and ending in +Inf
// with _count equal to it. Returns Map(name -> {type, samples: [{name, labels, value}]}).
export function parsePrometheus(text) {
  const families = new Map();
  const nameRe = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
  const familyOf = (sample) => {
    if (families.has(sample)) return families.get(sample);
    for (const suffix of ['_bucket', '_sum', '_count', '_total', '_created']) {
      if (sample.endsWith(suffix) && families.has(sample.slice(0, -suffix.length)))
        return families.get(sample.slice(0, -suffix.length));
    }
    return undefined;
  };
  if (!text.endsWith('\n')) throw new Error('exposition must end with a newline');
  const lines = text.split('\n');
  lines.pop();
  lines.forEach((line, i) => {
    const where = `line ${i + 1}: ${line}`;
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = line.match(/^# (HELP|TYPE) (\S+)(?: (.*))?$/);
      if (!m) return;  // a plain comment
      if (!nameRe.test(m[2])) throw new Error(`bad metric name, ${where}`);
      if (m[1] === 'TYPE') {
        if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(m[3])) throw new Error(`bad type, ${where}`);
        if (families.has(m[2]) && families.get(m[2]).samples.length) throw new Error(`TYPE after samples, ${where}`);
        families.set(m[2], { type: m[3], samples: [] });
      }
      return;
    }
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( -?\d+)?$/);
    if (!m) throw new Error(`bad sample, ${where}`);
    const labels = {};
    if (m[3] !== undefined && m[3] !== '') {
      const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/y;
      let pos = 0;
      while (pos < m[3].length) {
        labelRe.lastIndex = pos;
        const lm = labelRe.exec(m[3]);
        if (!lm) throw new Error(`bad labels, ${where}`);
        labels[lm[1]] = lm[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
        pos = labelRe.lastIndex;
      }
    }
    const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : m[4] === 'NaN' ? NaN : Number(m[4]);
    if (Number.isNaN(value) && m[4] !== 'NaN') throw new Error(`bad value, ${where}`);
    const fam = familyOf(m[1]);
    if (!fam) throw new Error(`sample without a # TYPE, ${where}`);
    fam.samples.push({ name: m[1], labels, value });
  });
  for (const [name, fam] of families) {
    if (fam.type !== 'histogram') continue;
    const series = new Map();
    for (const s of fam.samples) {
      const { le, ...rest } = s.labels;
      const key = JSON.stringify(rest);
      if (!series.has(key)) series.set(key, { buckets: [], count: undefined });
      if (s.name === `${name}_bucket`) series.get(key).buckets.push([le === '+Inf' ? Infinity : Number(le), s.value]);
      if (s.name === `${name}_count`) series.get(key).count = s.value;
    }
    for (const [key, { buckets, count }] of series) {
      if (!buckets.length || buckets.at(-1)[0] !== Infinity) throw new Error(`${name}${key}: no +Inf bucket`);
      for (let i = 1; i < buckets.length; i++)
        if (buckets[i][0] <= buckets[i - 1][0] || buckets[i][1] < buckets[i - 1][1])
          throw new Error(`${name}${key}: buckets not increasing / cumulative`);
      if (count !== buckets.at(-1)[1]) throw new Error(`${name}${key}: _count ${count} != +Inf bucket`);
    }
  }
  return families;
}

// The value of one sample (labels matched exactly on the given keys), or undefined.
export function metricValue(families, name, labels = {}) {
  for (const fam of families.values())
    for (const s of fam.samples)
      if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) return s.value;
  return undefined;
}

export async function scrape(url, headers = {}) {
  const r = await fetch(`${url}/metrics`, { headers });
  if (r.status !== 200) throw new Error(`/metrics answered ${r.status}`);
  return parsePrometheus(await r.text());
}
