// The chat page: the conversation list, the settings, and one streamed answer at a time over
// POST v1/chat/completions (stream: true). The answer is re-rendered from its whole text as
// deltas arrive (at most once a frame), so markdown that spans chunks comes out right.

import { Api, errorMessage } from "./api.js";
import { escapeHtml } from "./highlight.js";
import { renderMarkdown } from "./markdown.js";
import { sseEvents } from "./sse.js";
import { timingLine } from "./timing.js";
import { ChatStore, DEFAULT_SETTINGS, loadSettings, saveSettings } from "./store.js";

const $ = (id) => document.getElementById(id);
const store = new ChatStore();
const api = new Api(askKey);
let settings = loadSettings();
let models = [];        // ids from GET v1/models
let seeing = new Set(); // the models that take images (meta.modalities has "image")
let images = [];        // data: URLs of the images attached to the message being written
let running = null;     // {controller, reply, chat} while an answer streams
const nodes = new WeakMap();  // message -> its element

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// --- the API key ------------------------------------------------------------------------------

function askKey(reason) {
  const dialog = $("key-dialog");
  $("key-reason").textContent = reason;
  $("key-input").value = "";
  dialog.showModal();
  return new Promise((resolve) => {
    const done = (key) => {
      $("key-form").onsubmit = null;
      $("key-cancel").onclick = null;
      dialog.close();
      resolve(key);
    };
    $("key-form").onsubmit = (e) => { e.preventDefault(); done($("key-input").value.trim() || null); };
    $("key-cancel").onclick = () => done(null);
    dialog.oncancel = () => done(null);
  });
}

// --- models -----------------------------------------------------------------------------------

async function loadModels() {
  try {
    const r = await api.fetch("v1/models");
    if (r.status === 503) {  // the server is up and still loading the model
      setStatus("the model is loading…");
      setTimeout(loadModels, 1000);
      return;
    }
    if (!r.ok) throw new Error(await errorMessage(r));
    const data = (await r.json()).data || [];
    models = data.map((m) => m.id).filter(Boolean);
    seeing = new Set(data.filter((m) => (m.meta?.modalities || []).includes("image")).map((m) => m.id));
  } catch (e) {
    setStatus(`could not list models: ${e.message}`);
    return;
  }
  const select = $("model");
  select.replaceChildren(...models.map((id) => el("option", "", id)));
  if (!models.includes(settings.model)) settings.model = models[0] || "";
  select.value = settings.model;
  $("model-picker").hidden = models.length < 2;
  $("model-name").textContent = models.length === 1 ? models[0] : "";
  setStatus("");
  showAttach();
}

// --- images -----------------------------------------------------------------------------------

// The image button shows for a model that takes images, or one not loaded yet (a many-model
// server lists modalities once a model is loaded; the server answers 400 if it takes none).
function showAttach() {
  const m = settings.model || models[0];
  $("attach").hidden = !m || (models.length === 1 && !seeing.has(m));
}

function attachFiles(files) {
  for (const file of files) {
    if (!file.type.startsWith("image/")) continue;
    const reader = new FileReader();
    reader.onload = () => { images.push(reader.result); renderAttachments(); };
    reader.readAsDataURL(file);
  }
}

function renderAttachments() {
  const box = $("attachments");
  box.hidden = images.length === 0;
  box.replaceChildren(...images.map((url, i) => {
    const item = el("span", "attachment");
    const img = el("img", "thumb");
    img.src = url;
    img.alt = `image ${i + 1}`;
    const drop = el("button", "remove", "×");
    drop.type = "button";
    drop.title = "Remove this image";
    drop.onclick = () => { images.splice(i, 1); renderAttachments(); };
    item.append(img, drop);
    return item;
  }));
}

function setStatus(text) {
  $("status").textContent = text;
}

// --- settings ---------------------------------------------------------------------------------

const FIELDS = ["system", "temperature", "top_p", "max_tokens", "seed", "tools"];
const SWITCHES = ["show_speculative"];  // checkboxes

function showSettings() {
  for (const f of FIELDS) $(f).value = settings[f] ?? "";
  for (const f of SWITCHES) $(f).checked = Boolean(settings[f]);
}

function readSettings() {
  for (const f of FIELDS) settings[f] = $(f).value;
  for (const f of SWITCHES) settings[f] = $(f).checked;
  saveSettings(settings);
}

// The request's sampling fields from the settings, or throws naming the bad one.
function samplingFields() {
  const out = {};
  const number = (name, { min, max, integer }) => {
    const raw = String(settings[name] ?? "").trim();
    if (raw === "") return;
    const v = Number(raw);
    if (!Number.isFinite(v) || (integer && !Number.isSafeInteger(v)) || (min !== undefined && v < min) ||
        (max !== undefined && v > max)) {
      throw new Error(`settings: ${name} must be ${integer ? "an integer" : "a number"}` +
        (min !== undefined ? ` ≥ ${min}` : "") + (max !== undefined ? ` and ≤ ${max}` : ""));
    }
    out[name] = v;
  };
  // the server's ranges (edgellm.validation): temperature has no upper bound, seed is any integer
  number("temperature", { min: 0 });
  number("top_p", { min: 0, max: 1 });
  number("max_tokens", { min: 1, integer: true });
  number("seed", { integer: true });
  const tools = String(settings.tools || "").trim();
  if (tools) {
    let parsed;
    try { parsed = JSON.parse(tools); } catch (e) { throw new Error(`settings: tools is not JSON: ${e.message}`); }
    if (!Array.isArray(parsed)) throw new Error("settings: tools must be a JSON array");
    if (parsed.length) out.tools = parsed;
  }
  return out;
}

// --- rendering --------------------------------------------------------------------------------

function renderList() {
  const list = $("chats");
  list.replaceChildren(...store.chats.map((chat) => {
    const item = el("li", chat.id === store.currentId ? "active" : "");
    item.dataset.id = chat.id;
    const open = el("button", "chat-title", chat.title);
    open.type = "button";
    open.title = chat.title;
    open.onclick = () => { if (!running) { store.select(chat.id); render(); } };
    const del = el("button", "chat-delete", "×");
    del.type = "button";
    del.setAttribute("aria-label", `Delete "${chat.title}"`);
    del.onclick = () => {
      if (running && running.chat === chat) running.controller.abort();
      store.remove(chat.id);
      render();
    };
    item.append(open, del);
    return item;
  }));
}

function renderMessages() {
  const box = $("messages");
  const chat = store.current;
  if (!chat || chat.messages.length === 0) {
    box.replaceChildren(el("p", "empty", "Ask anything. Answers stream from the model on this server."));
    return;
  }
  box.replaceChildren(...chat.messages.map(messageNode));
  box.scrollTop = box.scrollHeight;
}

function render() {
  renderList();
  renderMessages();
}

function messageNode(m) {
  const node = el("div", `message ${m.role}`);
  node.dataset.role = m.role;
  node.append(el("div", "body"));
  if (m.role === "assistant") node.append(el("div", "meta"));
  nodes.set(m, node);
  fill(m);
  return node;
}

function stateOf(m) {
  if (m.error) return "error";
  if (m.stopped) return "stopped";
  return running && running.reply === m ? "streaming" : "done";
}

function fill(m) {
  const node = nodes.get(m);
  if (!node) return;
  const body = node.querySelector(".body");
  if (m.role !== "assistant") {
    body.textContent = m.content;
    for (const url of m.images || []) {
      const img = el("img", "thumb");
      img.src = url;
      img.alt = "attached image";
      body.prepend(img);
    }
    return;
  }
  node.dataset.state = stateOf(m);
  let html = "";
  if (m.reasoning) {
    html += `<details class="reasoning"><summary>Reasoning</summary>${renderMarkdown(m.reasoning)}</details>`;
  }
  html += renderMarkdown(m.content);
  for (const call of m.tool_calls || []) html += toolCallHtml(call);
  if (m.error) html += `<p class="error">${escapeHtml(m.error)}</p>`;
  body.innerHTML = html;
  node.querySelector(".meta").textContent = timingLine(m, models, settings.show_speculative);
}

function toolCallHtml(call) {
  let args = call.arguments;
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* partial or not JSON */ }
  return `<div class="tool-call"><div class="tool-name">tool call: ${escapeHtml(call.name)}` +
    `${call.id ? ` <span class="tool-id">${escapeHtml(call.id)}</span>` : ""}</div>` +
    `<pre><code>${escapeHtml(args)}</code></pre></div>`;
}

let frame = 0;
let savedAt = 0;
function scheduleFill(m) {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    const box = $("messages");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    fill(m);
    if (atBottom) box.scrollTop = box.scrollHeight;
    if (Date.now() - savedAt > 1000) {  // a reload mid-answer keeps what had arrived
      savedAt = Date.now();
      store.save();
    }
  });
}

// --- one answer -------------------------------------------------------------------------------

function applyEvent(reply, ev) {
  if (ev.error) {  // an error after the stream began (timeout, engine failure)
    reply.error = ev.error.message || String(ev.error);
    return;
  }
  for (const choice of ev.choices || []) {
    const d = choice.delta || {};
    if (d.content) reply.content += d.content;
    if (d.reasoning_content) reply.reasoning = (reply.reasoning || "") + d.reasoning_content;
    for (const t of d.tool_calls || []) {
      const calls = reply.tool_calls || (reply.tool_calls = []);
      const k = Number.isInteger(t.index) ? t.index : calls.length;
      const call = calls[k] || (calls[k] = { id: "", name: "", arguments: "" });
      if (t.id) call.id = t.id;
      if (t.function?.name) call.name += t.function.name;
      if (t.function?.arguments) call.arguments += t.function.arguments;
    }
    if (choice.finish_reason) reply.finish_reason = choice.finish_reason;
  }
  if (ev.timings) reply.timings = ev.timings;  // running under timings_per_token, then final
  if (ev.usage) reply.usage = ev.usage;
}

function requestMessages(chat, reply) {
  const out = [];
  if (settings.system.trim()) out.push({ role: "system", content: settings.system });
  for (const m of chat.messages) {
    if (m === reply || m.error || (m.role === "assistant" && !m.content)) continue;
    out.push({ role: m.role, content: m.images?.length ? [  // the images, then the text
      ...m.images.map((url) => ({ type: "image_url", image_url: { url } })),
      { type: "text", text: m.content }] : m.content });
  }
  return out;
}

function setRunning(on) {
  $("send").disabled = on;
  $("stop").disabled = !on;
  document.body.classList.toggle("running", on);
}

async function send(text, attached = []) {
  const chat = store.current || store.create();
  const reply = {
    role: "assistant", content: "", model: settings.model || models[0] || "", streaming: true,
  };
  chat.messages.push(attached.length ? { role: "user", content: text, images: attached } :
    { role: "user", content: text }, reply);
  store.touch(chat);
  const controller = new AbortController();
  running = { controller, reply, chat };
  setRunning(true);
  render();
  try {
    const body = {
      model: reply.model || undefined, messages: requestMessages(chat, reply), stream: true,
      stream_options: { include_usage: true }, timings_per_token: true, ...samplingFields(),
    };
    const response = await api.fetch("v1/chat/completions", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body), signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorMessage(response));
    for await (const ev of sseEvents(response)) {
      applyEvent(reply, ev);
      scheduleFill(reply);
    }
  } catch (e) {
    if (e.name === "AbortError") reply.stopped = true;
    else reply.error = e.message || String(e);
  } finally {
    delete reply.streaming;
    running = null;
    setRunning(false);
    store.touch(chat);
    renderList();
    fill(reply);
  }
}

// --- wiring -----------------------------------------------------------------------------------

function start() {
  showSettings();
  $("settings").oninput = () => { readSettings(); $("settings-error").hidden = true; };
  $("settings-reset").onclick = () => {
    settings = { ...DEFAULT_SETTINGS, model: settings.model };
    saveSettings(settings);
    showSettings();
  };
  $("settings-toggle").onclick = () => {
    const panel = $("settings");
    panel.hidden = !panel.hidden;
    $("settings-toggle").setAttribute("aria-expanded", String(!panel.hidden));
  };
  $("model").onchange = () => { settings.model = $("model").value; saveSettings(settings); showAttach(); };
  $("attach").onclick = () => $("image-file").click();
  $("image-file").onchange = () => { attachFiles($("image-file").files); $("image-file").value = ""; };
  $("input").onpaste = (e) => {  // a pasted image (a screenshot) is attached, text pastes as text
    const files = [...(e.clipboardData?.files || [])].filter((f) => f.type.startsWith("image/"));
    if (files.length) { e.preventDefault(); attachFiles(files); }
  };
  $("new-chat").onclick = () => {
    if (running) return;
    const empty = store.current && store.current.messages.length === 0 ? store.current : null;
    if (!empty) store.create();
    render();
    $("input").focus();
  };
  $("composer").onsubmit = (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if ((!text && !images.length) || running) return;
    $("input").value = "";
    const attached = images;
    images = [];
    renderAttachments();
    send(text, attached);
  };
  $("input").onkeydown = (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  };
  $("stop").onclick = () => { if (running) running.controller.abort(); };
  render();
  loadModels();
}

start();
