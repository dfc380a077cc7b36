// The server's HTTP API as the page calls it: the API key (kept in localStorage) goes with
// every request as `Authorization: Bearer`, and a 401 is answered by asking for the key, once
// for however many requests were refused at the same time, then trying again.

import { loadKey, saveKey } from "./store.js";

export class Api {
  // askKey(reason) -> Promise of the key the user typed, or null when they gave none
  constructor(askKey) {
    this.askKey = askKey;
    this.key = loadKey();
    this.asking = null;
  }

  async fetch(path, init = {}) {
    for (;;) {
      const headers = new Headers(init.headers || {});
      if (this.key) headers.set("Authorization", `Bearer ${this.key}`);
      const sent = this.key;
      const response = await fetch(path, { ...init, headers });
      if (response.status !== 401) return response;
      if (this.key !== sent) continue;  // another request got a new key meanwhile
      if (!this.asking) {
        const reason = sent ? "The server refused the saved API key." :
          "This server needs an API key.";
        this.asking = this.askKey(reason).finally(() => { this.asking = null; });
      }
      const key = await this.asking;
      if (!key) return response;  // the caller reports the 401
      if (key !== this.key) {
        this.key = key;
        saveKey(key);
      }
    }
  }
}

// The message of an error answer: OpenAI's envelope {"error": {"message"}}, else the text.
export async function errorMessage(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body && body.error) return `${response.status}: ${body.error.message || body.error}`;
  } catch { /* not JSON */ }
  return `${response.status}: ${text.slice(0, 300) || response.statusText}`;
}
