// tessera chat page: tool calls of an answer as cards. Streamed `delta.tool_calls` entries are
// merged by index (id, type and name arrive first, the arguments string in pieces, as OpenAI
// streams them); each card shows the function name and its arguments as pretty JSON, and offers
// a field to send the tool's result back as a `tool` message.

export class ToolCallCards {
  /** onResult(call, text) is called when the user sends a result for a call. */
  constructor(container, onResult) {
    this.root = container;
    this.onResult = onResult;
    this.calls = [];  // [{id, type, function: {name, arguments}}]
    this.cards = [];
  }

  apply(deltas) {
    for (const d of deltas || []) {
      const i = Number.isInteger(d.index) ? d.index : this.calls.length;
      const call = this.calls[i] ||= { id: '', type: 'function', function: { name: '', arguments: '' } };
      if (d.id) call.id = d.id;
      if (d.type) call.type = d.type;
      if (d.function?.name) call.function.name += d.function.name;
      if (typeof d.function?.arguments === 'string') call.function.arguments += d.function.arguments;
      this.render(i);
    }
  }

  render(i) {
    const call = this.calls[i];
    let card = this.cards[i];
    if (!card) {
      card = this.cards[i] = this.makeCard(i);
      this.root.append(card.el);
    }
    card.name.textContent = call.function.name || '…';
    card.id.textContent = call.id ? `id ${call.id}` : '';
    card.el.setAttribute('aria-label', `Tool call ${call.function.name}`);
    const raw = call.function.arguments;
    try {
      card.args.textContent = JSON.stringify(JSON.parse(raw), null, 2);
      card.note.textContent = '';
    } catch {
      card.args.textContent = raw;
      card.note.textContent = raw ? 'arguments are not (yet) valid JSON' : '';
    }
  }

  makeCard(i) {
    const el = document.createElement('section');
    el.className = 'tool-card';
    const head = document.createElement('header');
    const label = document.createElement('span');
    label.className = 'tool-label';
    label.textContent = 'Tool call';
    const name = document.createElement('code');
    name.className = 'tool-name';
    const id = document.createElement('span');
    id.className = 'tool-id';
    head.append(label, ' ', name, ' ', id);
    const args = document.createElement('pre');
    args.className = 'tool-args';
    const note = document.createElement('p');
    note.className = 'tool-note';
    const form = document.createElement('form');
    form.className = 'tool-result';
    const inputId = `tool-result-${Math.random().toString(36).slice(2)}`;
    const lab = document.createElement('label');
    lab.htmlFor = inputId;
    lab.textContent = 'Result';
    const input = document.createElement('input');
    input.id = inputId;
    input.placeholder = 'e.g. {"temperature_c": 21, "sky": "clear"}';
    const send = document.createElement('button');
    send.type = 'submit';
    send.textContent = 'Send result';
    form.append(lab, input, send);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!input.value.trim()) return input.focus();
      send.disabled = input.disabled = true;
      this.onResult(this.calls[i], input.value.trim());
    });
    el.append(head, args, note, form);
    return { el, name, id, args, note };
  }
}
