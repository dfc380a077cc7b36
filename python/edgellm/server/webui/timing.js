// The line under an answer: its timings, as the server reported them (app.js shows it).

const rate = (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));

// "prompt 12 tokens, 340 t/s · answer 80 tokens, 25.1 t/s · speculative 30/41 accepted (73%)";
// the speculative part only when the settings ask for it (showSpeculative), as llama.cpp and
// Ollama show it only when asked; the model's id when the server has several (models).
export function timingLine(m, models = [], showSpeculative = false) {
  const t = m.timings || {};
  const parts = [];
  const cached = m.usage?.prompt_tokens_details?.cached_tokens || t.cache_n || 0;
  if (t.prompt_n !== undefined) {
    parts.push(`prompt ${t.prompt_n} tokens` + (t.prompt_per_second ? `, ${rate(t.prompt_per_second)} t/s` : "") +
      (cached ? ` (+${cached} cached)` : ""));
  } else if (t.prompt_ms !== undefined) {
    parts.push(`first token after ${t.prompt_ms.toFixed(0)} ms`);
  }
  if (t.predicted_n) {
    parts.push(`answer ${t.predicted_n} tokens` +
      (t.predicted_per_second ? `, ${rate(t.predicted_per_second)} t/s` : ""));
  }
  if (showSpeculative && t.draft_n) {
    const accepted = t.draft_n_accepted || 0;
    parts.push(`speculative ${accepted}/${t.draft_n} accepted (${Math.round(100 * accepted / t.draft_n)}%)`);
  }
  if (m.stopped) parts.push("stopped");
  else if (m.finish_reason === "length") parts.push("max_tokens reached");
  if (m.model && models.length > 1) parts.push(m.model);
  return parts.join(" · ");
}
