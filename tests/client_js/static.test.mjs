// Source-level guarantees for client/: no HTML sinks, nothing fetched from another origin.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const CLIENT = fileURLToPath(new URL("../../client/", import.meta.url));

function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : [path];
  });
}

test("no HTML sinks or eval in client code", () => {
  const sinks = /\b(innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\s*\(|new Function|srcdoc)\b/;
  for (const path of files(CLIENT).filter((p) => p.endsWith(".js"))) {
    const text = readFileSync(path, "utf8");
    assert.ok(!sinks.test(text), `${path}: ${text.match(sinks)}`);
  }
});

test("everything is served by the gateway: no CDN, no remote scripts or styles", () => {
  for (const path of files(CLIENT).filter((p) => /\.(html|css|js)$/.test(p))) {
    const text = readFileSync(path, "utf8");
    const remote = /(src|href)\s*=\s*["']?(https?:)?\/\//i.test(text) || /@import\s+url\(\s*["']?https?:/i.test(text);
    assert.ok(!remote, path);
  }
});

test("the token never touches storage or URLs", () => {
  for (const path of files(CLIENT).filter((p) => p.endsWith(".js"))) {
    const text = readFileSync(path, "utf8");
    // prefs.js alone stores anything: the non-secret flags it names, checked below.
    if (!path.endsWith("/js/prefs.js")) assert.ok(!/localStorage|sessionStorage|document\.cookie/.test(text), path);
    assert.ok(!/[?&]token=/.test(text), path);
  }
});

test("the only stored keys are prefs.js's non-secret flags", async () => {
  const { PREF_KEYS } = await import("../../client/js/prefs.js");
  assert.deepEqual(Object.values(PREF_KEYS), ["delegate.notify.offered", "delegate.push.subscription"]);
  for (const path of files(CLIENT).filter((p) => p.endsWith(".js") && !p.endsWith("/js/prefs.js"))) {
    const text = readFileSync(path, "utf8");
    for (const match of text.matchAll(/(?:readPref|writePref)\(([^,)]+)/g)) {
      assert.match(match[1].trim(), /^PREF_KEYS\.\w+$/, `${path}: a stored key must be one of PREF_KEYS`);
    }
  }
});

test("no :has() looks through a subtree: its every change would recalculate the page's style", () => {
  // html:has(.app:not([hidden])) cost 6-20 ms of style per streamed delta with 5,000 events on
  // the page; a :has(> child) looks at one level only, and a state the code knows is an attribute.
  for (const path of files(CLIENT).filter((p) => p.endsWith(".css"))) {
    for (const m of readFileSync(path, "utf8").replace(/\/\*[\s\S]*?\*\//g, "").matchAll(/:has\(\s*([^)]*)\)/g)) {
      assert.ok(m[1].startsWith(">"), `${path}: ${m[0]}`);
    }
  }
});

test("each action in the top bar has its own icon (at desktop width they show only the icon)", () => {
  const html = readFileSync(join(CLIENT, "index.html"), "utf8");
  const actions = html.slice(html.indexOf('id="actions"'), html.indexOf('id="actions-more"'));
  const more = html.slice(html.indexOf('id="actions-more"'), html.indexOf("</header>"));
  const icons = [...(actions + more).matchAll(/data-icon="(\w+)"/g)].map((m) => m[1]);
  assert.ok(icons.length >= 10, `${icons}`);
  assert.deepEqual(icons.filter((name, i) => icons.indexOf(name) !== i), []);
  const dom = readFileSync(join(CLIENT, "js", "dom.js"), "utf8");
  for (const name of icons) assert.match(dom, new RegExp(`\\b${name}: \\[`), name);
});
