// Server-sent events from a fetch() Response: the JSON of each `data:` event, in order, until
// the body ends or the server sends `data: [DONE]`. The body arrives in arbitrary pieces, so
// lines are split only once complete, and a multi-byte character cut between two pieces is
// kept by the streaming TextDecoder.

export async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
        if (!done && end === buffer.length - 1 && buffer[end] === "\r") break;  // "\r\n" cut in two
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + (buffer.startsWith("\r\n", end) ? 2 : 1));
        if (line === "") {  // a blank line ends the event
          if (data.length) {
            const text = data.join("\n");
            data = [];
            if (text === "[DONE]") return;
            yield JSON.parse(text);
          }
        } else if (line.startsWith("data:")) {
          data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
        }  // comments (":") and other fields (event, id, retry) carry nothing for us
      }
      if (done) {
        if (data.length && data.join("\n") !== "[DONE]") yield JSON.parse(data.join("\n"));
        return;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
