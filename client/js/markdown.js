// A small, safe Markdown subset: paragraphs, line breaks, headings, quotes, lists, fenced
// code, inline code, emphasis, links (http/https only) and bare URLs.
//
// Parsing produces plain objects; rendering builds DOM nodes with createElement and
// textContent only. Untrusted text never becomes HTML: no HTML string is ever parsed.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const LIST_ITEM = /^ {0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const BLANK = /^\s*$/;

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

function startsBlock(line) {
  return FENCE.test(line) || LIST_ITEM.test(line) || HEADING.test(line) || QUOTE.test(line);
}

/** Text → block nodes: {type: paragraph|heading|quote|list|code, …}. */
export function parseMarkdown(source) {
  const lines = String(source ?? "").replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      i += 1;
      continue;
    }
    const fence = FENCE.exec(line);
    if (fence) {
      const marker = fence[1];
      const body = [];
      i += 1;
      while (i < lines.length) {
        const close = /^ {0,3}(`{3,}|~{3,})\s*$/.exec(lines[i]);
        if (close && close[1][0] === marker[0] && close[1].length >= marker.length) {
          i += 1;
          break;
        }
        body.push(lines[i]);
        i += 1;
      }
      blocks.push({ type: "code", lang: fence[2] || "", text: body.join("\n") });
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      blocks.push({ type: "heading", level: heading[1].length, children: parseInline(heading[2]) });
      i += 1;
      continue;
    }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) {
        body.push(QUOTE.exec(lines[i])[1]);
        i += 1;
      }
      blocks.push({ type: "quote", children: parseMarkdown(body.join("\n")) });
      continue;
    }
    const item = LIST_ITEM.exec(line);
    if (item) {
      const ordered = /\d/.test(item[1]);
      const start = ordered ? parseInt(item[1], 10) : 1;
      const texts = [];
      while (i < lines.length) {
        const m = LIST_ITEM.exec(lines[i]);
        if (m && /\d/.test(m[1]) === ordered) {
          texts.push(m[2]);
          i += 1;
        } else if (texts.length && !BLANK.test(lines[i]) && /^\s{2,}\S/.test(lines[i]) && !m) {
          texts[texts.length - 1] += `\n${lines[i].trim()}`; // an indented continuation line
          i += 1;
        } else {
          break;
        }
      }
      blocks.push({ type: "list", ordered, start, items: texts.map((t) => parseInline(t)) });
      continue;
    }
    const para = [];
    while (i < lines.length && !BLANK.test(lines[i]) && (para.length === 0 || !startsBlock(lines[i]))) {
      para.push(lines[i]);
      i += 1;
    }
    blocks.push({ type: "paragraph", children: parseInline(para.join("\n")) });
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

// ---- DOM ---------------------------------------------------------------------------

function el(doc, tag, className) {
  const node = doc.createElement(tag);
  if (className) node.className = className;
  return node;
}

function renderInline(doc, parent, nodes) {
  for (const n of nodes) {
    if (n.type === "text") parent.appendChild(doc.createTextNode(n.text));
    else if (n.type === "br") parent.appendChild(el(doc, "br"));
    else if (n.type === "code") {
      const code = el(doc, "code");
      code.textContent = n.text;
      parent.appendChild(code);
    } else if (n.type === "strong" || n.type === "em") {
      const node = el(doc, n.type);
      renderInline(doc, node, n.children);
      parent.appendChild(node);
    } else if (n.type === "link") {
      const a = el(doc, "a");
      a.setAttribute("href", n.href);
      a.setAttribute("target", "_blank");
      a.setAttribute("rel", "noopener noreferrer nofollow");
      renderInline(doc, a, n.children);
      parent.appendChild(a);
    }
  }
}

function renderBlocks(doc, parent, blocks) {
  for (const b of blocks) {
    if (b.type === "paragraph") {
      const p = el(doc, "p");
      renderInline(doc, p, b.children);
      parent.appendChild(p);
    } else if (b.type === "heading") {
      const h = el(doc, "p", `md-h md-h${Math.min(b.level, 3)}`); // headings inside a bubble stay modest
      renderInline(doc, h, b.children);
      parent.appendChild(h);
    } else if (b.type === "quote") {
      const q = el(doc, "blockquote");
      renderBlocks(doc, q, b.children);
      parent.appendChild(q);
    } else if (b.type === "list") {
      const list = el(doc, b.ordered ? "ol" : "ul");
      if (b.ordered && b.start !== 1) list.setAttribute("start", String(b.start));
      for (const item of b.items) {
        const li = el(doc, "li");
        renderInline(doc, li, item);
        list.appendChild(li);
      }
      parent.appendChild(list);
    } else if (b.type === "code") {
      const pre = el(doc, "pre");
      const code = el(doc, "code");
      if (b.lang) code.setAttribute("data-lang", b.lang);
      code.textContent = b.text;
      pre.appendChild(code);
      parent.appendChild(pre);
    }
  }
}

/** Render Markdown text into a DocumentFragment built from text nodes and safe elements. */
export function renderMarkdown(doc, source) {
  const frag = doc.createDocumentFragment();
  renderBlocks(doc, frag, parseMarkdown(source));
  return frag;
}
