import assert from "node:assert/strict";
import { test } from "node:test";

import { parseInline, parseMarkdown, renderMarkdown, safeHref } from "../../client/js/markdown.js";
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

test("fenced code blocks, closed or not", () => {
  assert.equal(
    html("```js\nconst a = '<b>';\n\n*not em*\n```\nafter"),
    "<pre><code data-lang=\"js\">const a = '&lt;b&gt;';\n\n*not em*</code></pre><p>after</p>",
  );
  assert.equal(html("~~~\nopen to the end"), "<pre><code>open to the end</code></pre>");
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
  ].join("\n\n");
  const frag = renderMarkdown(fakeDocument(), nasty);
  const allowed = new Set(["P", "BR", "EM", "STRONG", "CODE", "PRE", "A", "UL", "OL", "LI", "BLOCKQUOTE"]);
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
