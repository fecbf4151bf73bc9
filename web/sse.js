// tessera chat page: a streaming parser of Server-Sent Events (the text/event-stream format of the
// HTML standard): lines split on LF, CRLF or CR across chunk boundaries, `event:` / `data:` fields
// (several data lines joined by LF), comments (`:`) ignored, an event dispatched at a blank line.
// Used on the body of fetch() (EventSource cannot POST nor send an Authorization header).

/** Returns {push(text), end()}; onEvent({event, data}) runs once per complete event. */
export function createSseParser(onEvent) {
  let buf = '';
  let event = '';
  let data = [];
  let sawCr = false;

  function line(l) {
    if (l === '') {
      if (data.length) onEvent({ event: event || 'message', data: data.join('\n') });
      event = '';
      data = [];
      return;
    }
    if (l.startsWith(':')) return;
    const colon = l.indexOf(':');
    const field = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? '' : l.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
    // id / retry are not used by this page.
  }

  return {
    push(text) {
      let start = 0;
      for (let i = 0; i < text.length; i++) {
        const c = text[i];
        if (c === '\n' && sawCr) {  // the LF of a CRLF split as CR | LF across chunks
          sawCr = false;
          start = i + 1;
          continue;
        }
        sawCr = false;
        if (c === '\r' || c === '\n') {
          line(buf + text.slice(start, i));
          buf = '';
          start = i + 1;
          if (c === '\r') {
            if (text[i + 1] === '\n') {
              i++;
              start = i + 1;
            } else if (i + 1 === text.length) {
              sawCr = true;
            }
          }
        }
      }
      buf += text.slice(start);
    },
    end() {
      // A final event without its blank line is discarded, as the standard says.
      buf = '';
      event = '';
      data = [];
    },
  };
}

/** Reads a fetch Response body as SSE, calling onEvent per event; resolves at the end. */
export async function readSse(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder('utf-8');
  const parser = createSseParser(onEvent);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parser.push(decoder.decode(value, { stream: true }));
  }
  parser.push(decoder.decode());
  parser.end();
}
