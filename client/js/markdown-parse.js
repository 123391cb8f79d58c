// The parser of the small, safe Markdown subset (see markdown.js): text to plain objects,
// blocks (paragraphs, headings, quotes, nested lists, pipe tables, fenced code) and inline
// nodes (text, code, emphasis, links, line breaks). No DOM here.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const LIST_ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const BLANK = /^\s*$/;
const TABLE_DELIM = /^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

/** A link target we will follow: absolute http(s) only; anything else renders as text. */
export function safeHref(raw) {
  if (typeof raw !== "string") return null;
  const text = raw.trim();
  if (!/^https?:\/\//i.test(text)) return null;
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

/** The cells of a pipe-table row ("| a | b |" → ["a", "b"]); `\|` stays a literal bar. */
export function splitRow(line) {
  let text = line.trim();
  if (text.startsWith("|")) text = text.slice(1);
  if (text.endsWith("|") && !text.endsWith("\\|")) text = text.slice(0, -1);
  const cells = [];
  let buf = "";
  for (let i = 0; i < text.length; i += 1) {
    if (text[i] === "\\" && text[i + 1] === "|") {
      buf += "|";
      i += 1;
    } else if (text[i] === "|") {
      cells.push(buf.trim());
      buf = "";
    } else {
      buf += text[i];
    }
  }
  cells.push(buf.trim());
  return cells;
}

function isTableStart(lines, i) {
  const head = lines[i];
  const delim = lines[i + 1];
  if (head === undefined || delim === undefined || !head.includes("|") || !TABLE_DELIM.test(delim)) return false;
  if (!delim.includes("|") && splitRow(head).length < 2) return false;
  return splitRow(head).length === splitRow(delim).length;
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || LIST_ITEM.test(line) || HEADING.test(line) || QUOTE.test(line) || isTableStart(lines, i);
}

function align(cell) {
  const c = cell.trim();
  if (c.startsWith(":") && c.endsWith(":")) return "center";
  if (c.endsWith(":")) return "right";
  if (c.startsWith(":")) return "left";
  return null;
}

/**
 * A list starting at `lines[i]`, nested by indentation: items indented deeper than the
 * first item's marker (two spaces or more) belong to the item above. Returns [block, next i].
 */
function parseList(lines, i) {
  const first = LIST_ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const start = ordered ? parseInt(first[2], 10) : 1;
  const items = []; // {text, sub: [lines]}
  while (i < lines.length) {
    const line = lines[i];
    const m = LIST_ITEM.exec(line);
    if (m && m[1].length <= indent + 1 && m[1].length >= indent - 1) {
      if (/\d/.test(m[2]) !== ordered) break;
      items.push({ text: m[3], sub: [] });
      i += 1;
      continue;
    }
    if (!items.length || BLANK.test(line)) {
      // A blank line ends the list unless a deeper item follows it.
      const next = lines[i + 1];
      const nm = next !== undefined ? LIST_ITEM.exec(next) : null;
      if (items.length && BLANK.test(line) && nm && nm[1].length > indent + 1) {
        i += 1;
        continue;
      }
      break;
    }
    const deeper = /^(\s*)/.exec(line)[1].length >= indent + 2;
    if (m && deeper) {
      items[items.length - 1].sub.push(line);
      i += 1;
    } else if (deeper && items[items.length - 1].sub.length) {
      items[items.length - 1].sub.push(line); // a continuation inside the nested list
      i += 1;
    } else if (!m && /^\s{2,}\S/.test(line)) {
      items[items.length - 1].text += `\n${line.trim()}`; // an indented continuation line
      i += 1;
    } else {
      break;
    }
  }
  const out = items.map((it) => {
    const children = parseInline(it.text);
    if (!it.sub.length) return children;
    const minIndent = Math.min(...it.sub.filter((l) => !BLANK.test(l)).map((l) => /^(\s*)/.exec(l)[1].length));
    const nested = parseMarkdown(it.sub.map((l) => l.slice(minIndent)).join("\n"));
    return { inline: children, blocks: nested };
  });
  return [{ type: "list", ordered, start, items: out }, i];
}

/**
 * Text → block nodes: {type: paragraph|heading|quote|list|code|table, line, …}. `line` is
 * where the block starts; a block never depends on the lines before it, which is what lets
 * a streaming answer re-parse only its last block (see `renderIncremental`).
 */
export function parseMarkdown(source, offset = 0) {
  const lines = Array.isArray(source) ? source : String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = offset;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      i += 1;
      continue;
    }
    const at = i;
    const fence = FENCE.exec(line);
    if (fence) {
      const marker = fence[1];
      const body = [];
      let closed = false;
      i += 1;
      while (i < lines.length) {
        const close = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(lines[i]);
        if (close && close[1][0] === marker[0] && close[1].length >= marker.length) {
          i += 1;
          closed = true;
          break;
        }
        body.push(lines[i]);
        i += 1;
      }
      blocks.push({ type: "code", line: at, lang: fence[2] || "", text: body.join("\n"), closed });
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      blocks.push({ type: "heading", line: at, level: heading[1].length, children: parseInline(heading[2]) });
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        body.push(QUOTE.exec(lines[i])[1]);
        i += 1;
      }
      blocks.push({ type: "quote", line: at, children: parseMarkdown(body.join("\n")) });
      continue;
    }
    if (isTableStart(lines, i)) {
      const head = splitRow(lines[i]);
      const aligns = splitRow(lines[i + 1]).map(align);
      const rows = [];
      i += 2;
      while (i < lines.length && !BLANK.test(lines[i]) && lines[i].includes("|") && !FENCE.test(lines[i])) {
        const cells = splitRow(lines[i]);
        rows.push(head.map((_, k) => parseInline(cells[k] ?? "")));
        i += 1;
      }
      blocks.push({ type: "table", line: at, aligns, head: head.map((c) => parseInline(c)), rows });
      continue;
    }
    if (LIST_ITEM.exec(line) && /^ {0,3}\S/.test(line)) {
      const [block, next] = parseList(lines, i);
      block.line = at;
      blocks.push(block);
      i = next;
      continue;
    }
    const para = [];
    while (i < lines.length && !BLANK.test(lines[i]) && (para.length === 0 || !startsBlock(lines, i))) {
      para.push(lines[i]);
      i += 1;
    }
    blocks.push({ type: "paragraph", line: at, children: parseInline(para.join("\n").trim()) });
  }
  return blocks;
}

const URL_AT = /^https?:\/\/[^\s<>"'`]+/i;
const ESCAPABLE = "\\`*_[]()#+-.!>~";

/** Inline text → nodes: text, code, strong, em, link, br. */
export function parseInline(text) {
  const out = [];
  let buf = "";
  const flush = () => {
    if (buf) out.push({ type: "text", text: buf });
    buf = "";
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "\\" && i + 1 < text.length && ESCAPABLE.includes(text[i + 1])) {
      buf += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "\n") {
      flush();
      out.push({ type: "br" });
      i += 1;
      continue;
    }
    if (c === "`") {
      let n = 1;
      while (text[i + n] === "`") n += 1;
      const ticks = "`".repeat(n);
      const end = text.indexOf(ticks, i + n);
      if (end > i + n - 1 && text[end + n] !== "`") {
        flush();
        let code = text.slice(i + n, end);
        if (/^ .* $/.test(code)) code = code.slice(1, -1);
        out.push({ type: "code", text: code });
        i = end + n;
        continue;
      }
      buf += ticks;
      i += n;
      continue;
    }
    if (c === "[") {
      const link = readLink(text, i);
      if (link) {
        flush();
        out.push(link.node);
        i = link.end;
        continue;
      }
    }
    if ((c === "*" || c === "_") && canOpen(text, i)) {
      const strong = text[i + 1] === c;
      const mark = strong ? c + c : c;
      const end = findClose(text, i + mark.length, mark);
      if (end > i + mark.length) {
        flush();
        out.push({ type: strong ? "strong" : "em", children: parseInline(text.slice(i + mark.length, end)) });
        i = end + mark.length;
        continue;
      }
    }
    if ((c === "h" || c === "H") && (i === 0 || /[\s(]/.test(text[i - 1]))) {
      const m = URL_AT.exec(text.slice(i));
      if (m) {
        let url = m[0];
        while (/[.,;:!?)\]]$/.test(url)) url = url.slice(0, -1); // sentence punctuation is not the URL
        const href = safeHref(url);
        if (href) {
          flush();
          out.push({ type: "link", href, children: [{ type: "text", text: url }] });
          i += url.length;
          continue;
        }
      }
    }
    buf += c;
    i += 1;
  }
  flush();
  return out;
}

function canOpen(text, i) {
  const c = text[i];
  const width = text[i + 1] === c ? 2 : 1;
  const next = text[i + width];
  if (!next || /\s/.test(next)) return false;
  // snake_case words keep their underscores
  return !(c === "_" && i > 0 && /[\p{L}\p{N}]/u.test(text[i - 1]));
}

function findClose(text, from, mark) {
  let j = from;
  while (j < text.length) {
    const k = text.indexOf(mark, j);
    if (k < 0) return -1;
    const prev = text[k - 1];
    const after = text[k + mark.length];
    const doubled = mark.length === 1 && after === mark; // "*" must not match inside "**"
    const wordAfter = mark[0] === "_" && after && /[\p{L}\p{N}]/u.test(after);
    if (k > from && prev && !/\s/.test(prev) && !doubled && !wordAfter) return k;
    j = k + (doubled ? 2 : 1);
  }
  return -1;
}

function readLink(text, i) {
  let depth = 0;
  let j = i;
  for (; j < text.length; j += 1) {
    if (text[j] === "[") depth += 1;
    else if (text[j] === "]") {
      depth -= 1;
      if (depth === 0) break;
    } else if (text[j] === "\n") return null;
  }
  if (j >= text.length || text[j + 1] !== "(") return null;
  const close = text.indexOf(")", j + 2);
  if (close < 0) return null;
  const target = text.slice(j + 2, close).trim();
  if (!target || /\s/.test(target)) return null;
  const href = safeHref(target);
  const label = text.slice(i + 1, j);
  if (!href) {
    // Not a link we follow: show exactly what was written, as text.
    return { node: { type: "text", text: text.slice(i, close + 1) }, end: close + 1 };
  }
  return { node: { type: "link", href, children: parseInline(label) }, end: close + 1 };
}
