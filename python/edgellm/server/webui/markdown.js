// Markdown to HTML for model answers: headings, paragraphs, lists (nested, ordered or not),
// block quotes, rules, tables, fenced code (highlighted by highlight.js), and inline code,
// bold, italic, strike-through and links. Every piece of the source is HTML-escaped before any
// markup is added, link targets are limited to http(s), mailto and relative URLs, and images
// become plain links (nothing is fetched because a model said so). An unterminated fence runs
// to the end, so a half-streamed answer renders as it will once complete.

import { escapeHtml, highlight } from "./highlight.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
const TABLE_RULE = /^ *\|? *:?-+:? *(?:\| *:?-+:? *)*\|? *$/;

export function renderMarkdown(source) {
  // NUL marks inline placeholders below; the source may not forge one
  const text = String(source ?? "").replace(/\r\n?/g, "\n").replace(/\0/g, "\uFFFD");
  return blocks(text.split("\n"));
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    ITEM.test(line);
}

function blocks(lines) {
  let out = "";
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (/^\s*$/.test(line)) { i++; continue; }
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const lang = m[2];
      const body = [];
      for (i++; i < lines.length; i++) {
        const close = lines[i].trim();
        if (close.length >= fence.length && close === fence[0].repeat(close.length)) { i++; break; }
        body.push(lines[i]);
      }
      const cls = lang ? ` class="language-${escapeHtml(lang)}"` : "";
      out += `<pre><code${cls}>${highlight(body.join("\n"), lang)}</code></pre>`;
    } else if ((m = HEADING.exec(line))) {
      const n = m[1].length;
      out += `<h${n}>${inline(m[2] || "")}</h${n}>`;
      i++;
    } else if (RULE.test(line)) {
      out += "<hr>";
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i++) body.push(lines[i].replace(QUOTE, ""));
      out += `<blockquote>${blocks(body)}</blockquote>`;
    } else if (ITEM.test(line)) {
      i = list(lines, i, (html) => { out += html; });
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) &&
               lines[i + 1].includes("-")) {
      i = table(lines, i, (html) => { out += html; });
    } else {
      const para = [];
      for (; i < lines.length && !/^\s*$/.test(lines[i]) && (para.length === 0 ||
        !startsBlock(lines[i])); i++) para.push(lines[i].trim());
      out += `<p>${para.map(inline).join("<br>")}</p>`;
    }
  }
  return out;
}

// A list starting at lines[i]: its items, each item's continuation lines (indented deeper than
// the marker, or a plain line right after it) rendered as blocks of their own.
function list(lines, i, emit) {
  const first = ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  let loose = false;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length > indent + 1 || /\d/.test(m[2]) !== ordered) break;
    const width = m[1].length + m[2].length + 1;
    const body = [m[3] || ""];
    for (i++; i < lines.length; i++) {
      const l = lines[i];
      if (/^\s*$/.test(l)) {
        const next = lines[i + 1];
        if (next !== undefined && /^\s*$/.test(next) === false &&
            (next.length - next.trimStart().length) > indent) { body.push(""); loose = true; continue; }
        break;
      }
      const lead = l.length - l.trimStart().length;
      if (lead > indent) body.push(l.slice(Math.min(lead, width)));
      else if (!startsBlock(l) && body[body.length - 1] !== "") body.push(l.trim());
      else break;
    }
    items.push(body);
    if (i < lines.length && /^\s*$/.test(lines[i])) {
      const next = lines[i + 1];
      const n = next !== undefined && ITEM.exec(next);
      if (n && n[1].length <= indent + 1 && /\d/.test(n[2]) === ordered) { loose = true; i++; }
    }
  }
  const start = ordered ? parseInt(first[2], 10) : 1;
  const open = ordered ? (start !== 1 ? `<ol start="${start}">` : "<ol>") : "<ul>";
  let html = open;
  for (const body of items) {
    let inner = blocks(body);
    if (!loose) inner = inner.replace(/^<p>([\s\S]*?)<\/p>/, "$1");  // tight: no paragraph
    html += `<li>${inner}</li>`;
  }
  emit(html + (ordered ? "</ol>" : "</ul>"));
  return i;
}

function cells(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

function table(lines, i, emit) {
  const head = cells(lines[i]);
  const align = cells(lines[i + 1]).map((c) =>
    c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" :
      c.startsWith(":") ? "left" : "");
  const style = (k) => (align[k] ? ` class="align-${align[k]}"` : "");
  let html = "<table><thead><tr>" +
    head.map((c, k) => `<th${style(k)}>${inline(c)}</th>`).join("") + "</tr></thead><tbody>";
  for (i += 2; i < lines.length && lines[i].includes("|") && !/^\s*$/.test(lines[i]); i++) {
    const row = cells(lines[i]);
    html += "<tr>" + head.map((_, k) => `<td${style(k)}>${inline(row[k] || "")}</td>`).join("") +
      "</tr>";
  }
  emit(html + "</tbody></table>");
  return i;
}

export function safeUrl(url) {
  const bare = url.replace(/[\u0000-\u0020\u007f]/g, "").toLowerCase();
  if (/^(https?:|mailto:)/.test(bare)) return true;
  return !/^[a-z][a-z0-9+.-]*:/.test(bare) && !bare.startsWith("//");  // relative
}

function unescapeHtml(s) {
  return s.replace(/&(amp|lt|gt|quot|#39);/g, (_, e) =>
    ({ amp: "&", lt: "<", gt: ">", quot: '"', "#39": "'" })[e]);
}

function link(textHtml, urlEscaped) {
  const url = unescapeHtml(urlEscaped);
  if (!safeUrl(url)) return textHtml;
  return `<a href="${escapeHtml(url)}" target="_blank" rel="noopener noreferrer nofollow">${textHtml}</a>`;
}

// Inline markup of one line. Code spans and finished links are set aside as NUL-delimited
// placeholders so that nothing inside them is read again.
export function inline(source) {
  const held = [];
  const hold = (html) => `\0${held.push(html) - 1}\0`;
  let s = String(source).replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, ticks, code) =>
    hold(`<code>${escapeHtml(code.trim() || code)}</code>`));
  s = escapeHtml(s);
  s = s.replace(/!?\[([^\]\0]*)\]\(\s*([^\s)]+)(?:\s+&quot;[^\0]*?&quot;)?\s*\)/g,
    (_, text, url) => hold(link(emphasis(text) || escapeHtml(unescapeHtml(url)), url)));
  // bare URLs: up to a space or an escaped quote / bracket (only &amp; continues one), less
  // the punctuation that ends a sentence
  s = s.replace(/&lt;(https?:\/\/[^\s&]+)&gt;|\bhttps?:\/\/(?:&amp;|[^\s<\0&])+/g, (whole, angled) => {
    if (angled) return hold(link(angled, angled));
    const url = whole.replace(/[.,;:!?)\]]+$/, "");
    return hold(link(url, url)) + whole.slice(url.length);
  });
  s = emphasis(s);
  return s.replace(/\0(\d+)\0/g, (_, k) => held[+k]);
}

function emphasis(s) {
  return s
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
    .replace(/\*([^\s*](?:[^*]*[^\s*])?)\*/g, "<em>$1</em>")
    .replace(/(^|[^\w])_([^\s_](?:[^_]*[^\s_])?)_(?!\w)/g, "$1<em>$2</em>")
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
}
