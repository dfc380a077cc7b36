// Code highlighting for fenced blocks: comments, strings, numbers and keywords of common
// languages, each wrapped in a <span class="tok-...">. One pass over the code with one regular
// expression per language family; every character of the input comes out HTML-escaped, so
// whatever the model writes stays text.

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

const words = (s) => new Set(s.split(" "));

const C_LIKE = words("auto break case catch char class const continue default delete do double " +
  "else enum extern false final float for friend goto if inline int long namespace new nullptr " +
  "operator private protected public return short signed sizeof static struct switch template " +
  "this throw true try typedef typename union unsigned using virtual void volatile while bool " +
  "constexpr override noexcept static_cast reinterpret_cast include define ifdef ifndef endif " +
  "import package extends implements interface instanceof super boolean byte null abstract " +
  "synchronized throws");

// comment: the regex source of the language's comments; strings: of its string literals
const FAMILIES = {
  c: { comment: String.raw`\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)`, keywords: C_LIKE },
  js: {
    comment: String.raw`\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)`,
    strings: String.raw`\x60(?:\\[\s\S]|[^\\\x60])*\x60?`,
    keywords: words("async await break case catch class const continue debugger default delete " +
      "do else export extends false finally for from function if import in instanceof let new " +
      "null of return static super switch this throw true try typeof undefined var void while " +
      "yield interface type enum implements private public protected readonly as any number " +
      "string boolean"),
  },
  python: {
    comment: String.raw`#[^\n]*`,
    strings: String.raw`[rbfuRBFU]{0,2}(?:"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$))`,
    keywords: words("and as assert async await break class continue def del elif else except " +
      "False finally for from global if import in is lambda None nonlocal not or pass raise " +
      "return True try while with yield match case self print"),
  },
  shell: {
    comment: String.raw`#[^\n]*`,
    keywords: words("if then else elif fi for while until do done case esac in function return " +
      "export local echo cd set unset exit source sudo"),
  },
  rust: {
    comment: String.raw`\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)`,
    keywords: words("as async await break const continue crate dyn else enum extern false fn for " +
      "if impl in let loop match mod move mut pub ref return self Self static struct super trait " +
      "true type unsafe use where while Some None Ok Err"),
  },
  go: {
    comment: String.raw`\/\/[^\n]*|\/\*[\s\S]*?(?:\*\/|$)`,
    strings: String.raw`\x60[^\x60]*\x60?`,
    keywords: words("break case chan const continue default defer else fallthrough for func go " +
      "goto if import interface map package range return select struct switch type var true " +
      "false nil"),
  },
  sql: {
    comment: String.raw`--[^\n]*|\/\*[\s\S]*?(?:\*\/|$)`,
    keywords: words("select from where insert into values update set delete create table drop " +
      "alter index join left right inner outer on group by order having limit and or not null " +
      "as distinct union primary key SELECT FROM WHERE INSERT INTO VALUES UPDATE SET DELETE " +
      "CREATE TABLE DROP ALTER INDEX JOIN LEFT RIGHT INNER OUTER ON GROUP BY ORDER HAVING LIMIT " +
      "AND OR NOT NULL AS DISTINCT UNION PRIMARY KEY"),
  },
  json: { comment: "(?!)", keywords: words("true false null") },
};

const ALIASES = {
  c: "c", h: "c", cpp: "c", "c++": "c", cc: "c", hpp: "c", cxx: "c", java: "c", cs: "c",
  csharp: "c", kotlin: "c", swift: "c", js: "js", javascript: "js", ts: "js", typescript: "js",
  jsx: "js", tsx: "js", mjs: "js", py: "python", python: "python", python3: "python",
  sh: "shell", bash: "shell", shell: "shell", zsh: "shell", console: "shell", rs: "rust",
  rust: "rust", go: "go", golang: "go", sql: "sql", json: "json", jsonc: "js",
};

const QUOTED = String.raw`"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?`;
const NUMBER = String.raw`\b(?:0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)[a-zA-Z]*\b`;
const IDENT = String.raw`[A-Za-z_$][\w$]*`;
const compiled = {};

function familyOf(lang) {
  const name = ALIASES[String(lang || "").toLowerCase()];
  if (!name) return null;
  if (!compiled[name]) {
    const f = FAMILIES[name];
    const strings = f.strings ? `${f.strings}|${QUOTED}` : QUOTED;
    compiled[name] = {
      keywords: f.keywords,
      pattern: new RegExp(`(${f.comment})|(${strings})|(${NUMBER})|(${IDENT})`, "g"),
    };
  }
  return compiled[name];
}

// The HTML of `code` highlighted as `lang`; unknown languages come back escaped, unmarked.
export function highlight(code, lang) {
  const family = familyOf(lang);
  if (!family) return escapeHtml(code);
  const { pattern, keywords } = family;
  let out = "";
  let last = 0;
  pattern.lastIndex = 0;
  for (let m; (m = pattern.exec(code)) !== null;) {
    if (m[0] === "") { pattern.lastIndex++; continue; }
    out += escapeHtml(code.slice(last, m.index));
    const kind = m[1] !== undefined ? "comment" : m[2] !== undefined ? "string"
      : m[3] !== undefined ? "number" : keywords.has(m[4]) ? "keyword" : null;
    out += kind ? `<span class="tok-${kind}">${escapeHtml(m[0])}</span>` : escapeHtml(m[0]);
    last = m.index + m[0].length;
  }
  return out + escapeHtml(code.slice(last));
}
