// What the page keeps in the browser's localStorage: the conversations, the settings and the
// API key. Nothing of it goes to the server except as part of a request.

const CHATS = "edgellm.chats.v1";
const SETTINGS = "edgellm.settings.v1";
const KEY = "edgellm.apiKey";

export const DEFAULT_SETTINGS = Object.freeze({
  system: "", temperature: 0.8, top_p: 0.95, max_tokens: 1024, seed: "", model: "", tools: "",
  show_speculative: false,
});

function read(name, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(name));
    return v === null ? fallback : v;
  } catch {
    return fallback;  // absent or not ours: start afresh rather than fail to load the page
  }
}

function write(name, value) {
  try {
    localStorage.setItem(name, JSON.stringify(value));
    return true;
  } catch {
    return false;  // storage full or disabled: the page still works for this visit
  }
}

export function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

// The conversations, newest first: {id, title, updated, messages: [{role, content, ...}]}.
export class ChatStore {
  constructor() {
    const saved = read(CHATS, {});
    this.chats = Array.isArray(saved.chats) ? saved.chats.filter((c) => c && c.id) : [];
    this.currentId = saved.current || null;
    // an answer still streaming when the page went away ends where it was last saved
    for (const chat of this.chats) {
      for (const m of chat.messages || []) {
        if (m.streaming) { delete m.streaming; m.stopped = true; }
      }
    }
  }

  get current() {
    return this.chats.find((c) => c.id === this.currentId) || null;
  }

  create() {
    const chat = { id: newId(), title: "New chat", updated: Date.now(), messages: [] };
    this.chats.unshift(chat);
    this.currentId = chat.id;
    this.save();
    return chat;
  }

  select(id) {
    if (this.chats.some((c) => c.id === id)) this.currentId = id;
    this.save();
  }

  remove(id) {
    this.chats = this.chats.filter((c) => c.id !== id);
    if (this.currentId === id) this.currentId = this.chats.length ? this.chats[0].id : null;
    this.save();
  }

  touch(chat) {  // moved to the top of the list, titled by its first question
    if (!this.chats.includes(chat)) return;  // deleted meanwhile
    chat.updated = Date.now();
    const first = chat.messages.find((m) => m.role === "user");
    if (first && chat.title === "New chat") chat.title = first.content.trim().slice(0, 60) || "New chat";
    this.chats = [chat, ...this.chats.filter((c) => c !== chat)];
    this.save();
  }

  save() {
    return write(CHATS, { chats: this.chats, current: this.currentId });
  }
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) };
}

export function saveSettings(settings) {
  write(SETTINGS, settings);
}

export function loadKey() {
  return localStorage.getItem(KEY) || "";
}

export function saveKey(key) {
  if (key) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}
