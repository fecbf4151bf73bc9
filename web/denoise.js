// tessera chat page: the denoising view of a block-diffusion answer. Each `diffusion_step` SSE event
// ({block_start, step, block_tokens, unmasked, conf}) becomes one frame: the block's positions as
// cells, still-masked ones drawn as ░, the ones unmasked at this step highlighted, earlier ones
// settled, prompt/context tokens dimmed. Frames are queued and played at a readable pace (events
// of a small model arrive faster than the eye follows; a long backlog plays fast); the committed
// text itself comes from the normal content deltas. The events carry token ids only, so unmasked
// cells show ids.

const MASK_GLYPH = '░';

// A key to the cell colours (the cells are aria-hidden; the captions say it in words).
function legend() {
  const p = document.createElement('p');
  p.className = 'legend';
  p.setAttribute('aria-hidden', 'true');
  for (const [state, text, label] of [['masked', MASK_GLYPH, 'masked'], ['new', '42', 'unmasked this step'],
    ['done', '42', 'unmasked earlier'], ['context', '42', 'prompt / context']]) {
    const item = document.createElement('span');
    const cell = document.createElement('span');
    cell.className = 'cell';
    cell.dataset.state = state;
    cell.textContent = text;
    item.append(cell, ` ${label}`);
    p.append(item);
  }
  return p;
}

export class DenoiseView {
  /** container: element to fill; opts.maskId: the model's mask token id when the server tells it. */
  constructor(container, opts = {}) {
    this.root = container;
    this.maskId = Number.isInteger(opts.maskId) ? opts.maskId : null;
    this.maskIdExact = this.maskId !== null;
    this.frameMs = opts.frameMs ?? 60;
    this.queue = [];
    this.timer = null;
    this.blocks = new Map();  // block_start -> {row, caption, cells, revealed:Set, tokens, steps}
    this.received = 0;
    this.shown = 0;
    this.finished = false;
    this.lastByBlock = new Map();  // block_start -> previous event's tokens (for the mask id)
    this.root.hidden = false;
    this.root.setAttribute('role', 'group');
    this.root.setAttribute('aria-label', 'Denoising of each block');
    this.summary = document.createElement('p');
    this.summary.className = 'denoise-summary';
    this.root.append(this.summary, legend());
    this.sync();
  }

  push(ev) {
    if (!ev || !Array.isArray(ev.block_tokens) || !Number.isInteger(ev.block_start)) return;
    this.received++;
    this.learnMaskId(ev);
    this.queue.push(ev);
    this.sync();
    this.schedule();
  }

  /** The stream ended: the remaining frames still play (a small model finishes long before). */
  finish() {
    this.finished = true;
    this.schedule();
    this.sync();
  }

  // The mask id is the value a position held one step before that step unmasked it (exact);
  // until a block shows two steps, the most common value among positions not yet unmasked.
  learnMaskId(ev) {
    const prev = this.lastByBlock.get(ev.block_start);
    this.lastByBlock.set(ev.block_start, ev.block_tokens);
    if (this.maskIdExact) return;
    if (prev) {
      for (const pos of ev.unmasked || []) {
        const i = pos - ev.block_start;
        if (i >= 0 && i < prev.length && prev[i] !== ev.block_tokens[i]) {
          this.maskId = prev[i];
          this.maskIdExact = true;
          this.redrawAll();
          return;
        }
      }
    }
    if (this.maskId !== null) return;
    const unmasked = new Set(ev.unmasked || []);
    const counts = new Map();
    ev.block_tokens.forEach((t, i) => {
      if (!unmasked.has(ev.block_start + i)) counts.set(t, (counts.get(t) || 0) + 1);
    });
    let best = null, bestCount = 1;  // a guess needs two equal values
    for (const [t, c] of counts) if (c > bestCount) [best, bestCount] = [t, c];
    if (best !== null) this.maskId = best;
  }

  schedule() {
    if (this.timer !== null || this.queue.length === 0) return;
    const backlog = this.queue.length;
    let delay = this.frameMs;
    if (backlog > 24) delay = Math.min(delay, 15);  // far behind (a long answer): catch up
    if (delay <= 0) {
      while (this.queue.length) this.draw(this.queue.shift());
      this.sync();
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = null;
      const ev = this.queue.shift();
      if (ev) this.draw(ev);
      this.sync();
      this.schedule();
    }, delay);
  }

  block(start, size) {
    let b = this.blocks.get(start);
    if (b) return b;
    const row = document.createElement('div');
    row.className = 'block';
    const caption = document.createElement('p');
    caption.className = 'block-caption';
    const cells = document.createElement('div');
    cells.className = 'cells';
    cells.setAttribute('aria-hidden', 'true');  // the caption says it in words
    row.append(caption, cells);
    this.root.append(row);
    b = { row, caption, cells, revealed: new Set(), tokens: [], newly: new Set(), steps: 0, size };
    this.blocks.set(start, b);
    return b;
  }

  draw(ev) {
    const b = this.block(ev.block_start, ev.block_tokens.length);
    b.newly = new Set(ev.unmasked || []);
    for (const p of b.newly) b.revealed.add(p);
    b.tokens = ev.block_tokens;
    b.text = Array.isArray(ev.block_text) ? ev.block_text : null;  // each cell's text (server extension)
    b.steps = Math.max(b.steps, (ev.step ?? 0) + 1);
    b.conf = ev.conf || [];
    this.render(ev.block_start, b);
    this.shown++;
  }

  redrawAll() {
    for (const [start, b] of this.blocks) this.render(start, b);
  }

  render(start, b) {
    while (b.cells.children.length < b.tokens.length) {
      const c = document.createElement('span');
      c.className = 'cell';
      b.cells.append(c);
    }
    let masked = 0;
    b.tokens.forEach((t, i) => {
      const pos = start + i;
      const c = b.cells.children[i];
      let state;
      if (b.newly.has(pos)) state = 'new';
      else if (b.revealed.has(pos)) state = 'done';
      else if (this.maskId !== null && t === this.maskId) state = 'masked';
      else state = 'context';
      if (state === 'masked') masked++;
      c.dataset.state = state;
      const text = b.text && typeof b.text[i] === 'string' ? b.text[i] : null;
      // Whitespace would collapse into nothing in a cell: show it as a visible symbol.
      const shown = text === null ? String(t) : text.replace(/\n/g, '\u21b5').replace(/ /g, '\u00b7') || '\u2205';
      c.textContent = state === 'masked' ? MASK_GLYPH : shown;
      c.title = state === 'masked' ? `position ${pos}: masked` : `position ${pos}: token ${t}` + (text === null ? '' : ` ${JSON.stringify(text)}`);
    });
    const total = b.tokens.length;
    b.caption.textContent =
      `Block at ${start}: step ${b.steps}, ${total - masked} of ${total} positions filled` +
      (masked === 0 ? ' (complete)' : `, ${masked} masked`);
  }

  sync() {
    const playing = this.queue.length > 0 || this.timer !== null;
    this.root.dataset.stepsReceived = String(this.received);
    this.root.dataset.stepsShown = String(this.shown);
    this.root.dataset.state = playing ? 'playing' : this.finished ? 'done' : 'waiting';
    this.summary.textContent = `Denoising: ${this.blocks.size} block${this.blocks.size === 1 ? '' : 's'}, ` +
      `${this.shown} of ${this.received} steps shown`;
  }
}
