// A small, safe Markdown subset: paragraphs, line breaks, headings, quotes, nested lists,
// pipe tables, fenced code (with a language label and a copy button), inline code,
// emphasis, links (http/https only) and bare URLs.
//
// Parsing produces plain objects; rendering builds DOM nodes with createElement and
// textContent only. Untrusted text never becomes HTML: no HTML string is ever parsed.
//
// markdown-parse.js turns text into those objects; this module turns them into DOM nodes,
// whole or, for a streaming answer, from its last block on.

import { parseMarkdown } from "./markdown-parse.js";

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

function renderBlock(doc, b) {
  if (b.type === "paragraph") {
    const p = el(doc, "p");
    renderInline(doc, p, b.children);
    return p;
  }
  if (b.type === "heading") {
    const h = el(doc, "p", `md-h md-h${Math.min(b.level, 3)}`); // headings inside a bubble stay modest
    renderInline(doc, h, b.children);
    return h;
  }
  if (b.type === "quote") {
    const q = el(doc, "blockquote");
    renderBlocks(doc, q, b.children);
    return q;
  }
  if (b.type === "list") {
    const list = el(doc, b.ordered ? "ol" : "ul");
    if (b.ordered && b.start !== 1) list.setAttribute("start", String(b.start));
    for (const item of b.items) {
      const li = el(doc, "li");
      if (Array.isArray(item)) renderInline(doc, li, item);
      else {
        renderInline(doc, li, item.inline);
        renderBlocks(doc, li, item.blocks);
      }
      list.appendChild(li);
    }
    return list;
  }
  if (b.type === "table") {
    const wrap = el(doc, "div", "md-table");
    const table = el(doc, "table");
    const thead = el(doc, "thead");
    const tr = el(doc, "tr");
    b.head.forEach((cell, k) => {
      const th = el(doc, "th");
      th.setAttribute("scope", "col");
      if (b.aligns[k]) th.setAttribute("data-align", b.aligns[k]);
      renderInline(doc, th, cell);
      tr.appendChild(th);
    });
    thead.appendChild(tr);
    table.appendChild(thead);
    const tbody = el(doc, "tbody");
    for (const row of b.rows) {
      const r = el(doc, "tr");
      row.forEach((cell, k) => {
        const td = el(doc, "td");
        if (b.aligns[k]) td.setAttribute("data-align", b.aligns[k]);
        renderInline(doc, td, cell);
        r.appendChild(td);
      });
      tbody.appendChild(r);
    }
    table.appendChild(tbody);
    wrap.appendChild(table);
    return wrap;
  }
  // code: a labelled block with a copy button (the page wires the click; see app.js)
  const wrap = el(doc, "div", "md-code");
  const bar = el(doc, "div", "md-code-bar");
  const label = el(doc, "span", "md-code-lang");
  label.textContent = b.lang || "code";
  const copy = el(doc, "button", "code-copy");
  copy.setAttribute("type", "button");
  copy.setAttribute("aria-label", `Copy ${b.lang || "code"} to the clipboard`);
  copy.setAttribute("title", "Copy code");
  copy.textContent = "Copy";
  bar.appendChild(label);
  bar.appendChild(copy);
  const pre = el(doc, "pre");
  const code = el(doc, "code");
  if (b.lang) code.setAttribute("data-lang", b.lang);
  code.textContent = b.text;
  pre.appendChild(code);
  wrap.appendChild(bar);
  wrap.appendChild(pre);
  return wrap;
}

function renderBlocks(doc, parent, blocks) {
  for (const b of blocks) parent.appendChild(renderBlock(doc, b));
}

/** Render Markdown text into a DocumentFragment built from text nodes and safe elements. */
export function renderMarkdown(doc, source) {
  const frag = doc.createDocumentFragment();
  renderBlocks(doc, frag, parseMarkdown(source));
  return frag;
}

/**
 * Render a growing text into `container`, re-parsing only from the start of the last block.
 * Every block but the last is finished once another block follows it, so its nodes are
 * kept as they are. `state` is the previous call's return value (or null); text that does
 * not extend the previous text (a retried stream) is rendered from scratch.
 * Returns the new state: {text, blocks, nodes, reparsed} (`reparsed`: blocks rebuilt now).
 */
export function renderIncremental(doc, container, state, text) {
  const source = String(text ?? "");
  const lines = source.replace(/\r\n?/g, "\n").split("\n");
  let keep = 0;
  let from = 0;
  if (state && source.startsWith(state.text) && state.blocks.length) {
    keep = state.blocks.length - 1;
    from = state.blocks[keep].line;
  }
  const kept = state ? state.blocks.slice(0, keep) : [];
  const keptNodes = state ? state.nodes.slice(0, keep) : [];
  if (state) {
    for (const node of state.nodes.slice(keep)) if (node.parentNode === container) container.removeChild(node);
  }
  if (!keep) {
    for (const node of [...container.childNodes]) container.removeChild(node);
  }
  const fresh = parseMarkdown(lines, from);
  const nodes = fresh.map((b) => renderBlock(doc, b));
  for (const node of nodes) container.appendChild(node);
  return { text: source, blocks: kept.concat(fresh), nodes: keptNodes.concat(nodes), reparsed: fresh.length };
}
