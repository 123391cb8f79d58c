import assert from "node:assert/strict";
import { test } from "node:test";

import { parseInline, parseMarkdown, safeHref } from "../../client/js/markdown-parse.js";
import { renderIncremental, renderMarkdown } from "../../client/js/markdown.js";
import { elements, fakeDocument, serialize } from "./fakedom.mjs";

const html = (src) => serialize(renderMarkdown(fakeDocument(), src));

test("paragraphs, line breaks and emphasis", () => {
  assert.equal(html("Hello *there* and **you**\nnext line\n\nSecond"), "<p>Hello <em>there</em> and <strong>you</strong><br></br>next line</p><p>Second</p>");
  assert.equal(html("_soft_ and __hard__"), "<p><em>soft</em> and <strong>hard</strong></p>");
  assert.equal(html("snake_case_name stays"), "<p>snake_case_name stays</p>");
  assert.equal(html("2 * 3 * 4"), "<p>2 * 3 * 4</p>");
  assert.equal(html("**unclosed"), "<p>**unclosed</p>");
  assert.equal(html("\\*literal\\*"), "<p>*literal*</p>");
});

test("inline code keeps its content verbatim", () => {
  assert.equal(html("run `rm -rf *` <now>"), "<p>run <code>rm -rf *</code> &lt;now&gt;</p>");
  assert.equal(html("``a ` b``"), "<p><code>a ` b</code></p>");
  assert.equal(html("a `lonely tick"), "<p>a `lonely tick</p>");
});

const CODE_BAR = (lang) =>
  `<div class="md-code"><div class="md-code-bar"><span class="md-code-lang">${lang}</span>` +
  `<button class="code-copy" type="button" aria-label="Copy ${lang} to the clipboard" title="Copy code">Copy</button></div>`;

test("fenced code blocks, closed or not", () => {
  assert.equal(
    html("```js\nconst a = '<b>';\n\n*not em*\n```\nafter"),
    CODE_BAR("js") + "<pre><code data-lang=\"js\">const a = '&lt;b&gt;';\n\n*not em*</code></pre></div><p>after</p>",
  );
  assert.equal(html("~~~\nopen to the end"), CODE_BAR("code") + "<pre><code>open to the end</code></pre></div>");
});

test("lists, headings, quotes", () => {
  assert.equal(html("- one\n- **two**\n  continued"), "<ul><li>one</li><li><strong>two</strong><br></br>continued</li></ul>");
  assert.equal(html("3. c\n4. d"), "<ol start=\"3\"><li>c</li><li>d</li></ol>");
  assert.equal(html("intro\n- item"), "<p>intro</p><ul><li>item</li></ul>");
  assert.equal(html("## Title\ntext"), "<p class=\"md-h md-h2\">Title</p><p>text</p>");
  assert.equal(html("> quoted\n> more"), "<blockquote><p>quoted<br></br>more</p></blockquote>");
});

test("links: http and https only, everything else is text", () => {
  assert.equal(
    html("[docs](https://example.org/a?b=1)"),
    "<p><a href=\"https://example.org/a?b=1\" target=\"_blank\" rel=\"noopener noreferrer nofollow\">docs</a></p>",
  );
  assert.equal(html("[x](javascript:alert(1))"), "<p>[x](javascript:alert(1))</p>");
  assert.equal(html("[x](data:text/html,hi)"), "<p>[x](data:text/html,hi)</p>");
  assert.equal(html("[x](//evil.example)"), "<p>[x](//evil.example)</p>");
  assert.match(html("see https://example.org/path."), /<a href="https:\/\/example.org\/path"[^>]*>https:\/\/example.org\/path<\/a>\.<\/p>/);
  assert.equal(safeHref("HTTPS://Example.org"), "https://example.org/");
  assert.equal(safeHref(" javascript:alert(1)"), null);
  assert.equal(safeHref("http://"), null);
  assert.equal(safeHref(42), null);
});

test("hostile text stays text: no element other than the safe set is ever made", () => {
  const nasty = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[<img src=x onerror=alert(1)>](https://ok.example)",
    "**<svg onload=alert(1)>**",
    "`<iframe>`",
    "```\n</code></pre><script>x</script>\n```",
    "[a](https://x.example/\"onmouseover=\"alert(1))",
    "| <b>x</b> | `<i>` |\n|---|---|\n| <script>y</script> | [z](javascript:1) |",
  ].join("\n\n");
  const frag = renderMarkdown(fakeDocument(), nasty);
  const allowed = new Set(["P", "BR", "EM", "STRONG", "CODE", "PRE", "A", "UL", "OL", "LI", "BLOCKQUOTE", "DIV", "SPAN", "BUTTON", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD"]);
  for (const el of elements(frag)) {
    assert.ok(allowed.has(el.tagName), el.tagName);
    for (const name of el.attributes.keys()) assert.ok(!name.startsWith("on"), name);
    if (el.tagName === "A") assert.match(el.getAttribute("href"), /^https:\/\//);
  }
  assert.ok(frag.textContent.includes("<script>alert(1)</script>"));
  assert.ok(frag.textContent.includes("<img src=x onerror=alert(1)>"));
});

test("the AST is plain data", () => {
  assert.deepEqual(parseInline("a *b*"), [
    { type: "text", text: "a " },
    { type: "em", children: [{ type: "text", text: "b" }] },
  ]);
  assert.deepEqual(parseMarkdown(""), []);
  assert.deepEqual(parseMarkdown(null), []);
  assert.equal(parseMarkdown("a\r\nb")[0].children[1].type, "br");
});

test("pipe tables: header, alignment, inline markup in cells, escaped bars", () => {
  const out = html("| Name | Qty |\n|:-----|----:|\n| **apple** | 3 |\n| a \\| b | `x` |");
  assert.equal(
    out,
    '<div class="md-table"><table><thead><tr><th scope="col" data-align="left">Name</th><th scope="col" data-align="right">Qty</th></tr></thead>' +
      '<tbody><tr><td data-align="left"><strong>apple</strong></td><td data-align="right">3</td></tr>' +
      '<tr><td data-align="left">a | b</td><td data-align="right"><code>x</code></td></tr></tbody></table></div>',
  );
  // A lone bar line without a delimiter row is a paragraph; a table can follow a paragraph.
  assert.equal(html("a | b"), "<p>a | b</p>");
  assert.match(html("intro\n| a | b |\n|---|---|\n| 1 | 2 |"), /^<p>intro<\/p><div class="md-table">/);
  // Short rows are padded, long rows cut to the header's width.
  assert.match(html("| a | b |\n|---|---|\n| 1 |\n| 1 | 2 | 3 |"), /<tr><td>1<\/td><td><\/td><\/tr><tr><td>1<\/td><td>2<\/td><\/tr>/);
});

test("nested lists by indentation, mixed ordered and unordered", () => {
  assert.equal(
    html("- fruit\n  - apple\n  - pear\n    1. ripe\n- veg"),
    "<ul><li>fruit<ul><li>apple</li><li>pear<ol><li>ripe</li></ol></li></ul></li><li>veg</li></ul>",
  );
  assert.equal(html("1. one\n   - a\n2. two"), "<ol><li>one<ul><li>a</li></ul></li><li>two</li></ol>");
  assert.equal(html("- a\n\nafter"), "<ul><li>a</li></ul><p>after</p>");
});

test("incremental rendering re-parses only the last block and keeps earlier nodes", () => {
  const doc = fakeDocument();
  const box = doc.createElement("div");
  const full = "Intro paragraph.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```py\nprint(1)\n```\n\nThe end, with **bold** text.";
  let state = null;
  const seen = [];
  for (let n = 1; n <= full.length; n += 7) {
    state = renderIncremental(doc, box, state, full.slice(0, n));
    seen.push(state.reparsed);
  }
  state = renderIncremental(doc, box, state, full);
  // The same DOM as a render from scratch.
  assert.equal(serialize(box), serialize(wrap(doc, full)));
  // Never more than the last block (plus any new one) rebuilt per step.
  assert.ok(Math.max(...seen) <= 2, String(seen));
  // A finished block keeps its node across later updates.
  const firstNode = state.nodes[0];
  state = renderIncremental(doc, box, state, `${full} More.`);
  assert.equal(state.nodes[0], firstNode);
  assert.equal(box.childNodes[0], firstNode);
  assert.equal(state.reparsed, 1);
  // A replaced text (a retried stream) starts over.
  state = renderIncremental(doc, box, state, "Different");
  assert.equal(serialize(box), "<div><p>Different</p></div>");
});

function wrap(doc, text) {
  const d = doc.createElement("div");
  d.appendChild(renderMarkdown(doc, text));
  return d;
}
