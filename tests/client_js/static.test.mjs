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
    assert.ok(!/localStorage|sessionStorage|document\.cookie/.test(text), path);
    assert.ok(!/[?&]token=/.test(text), path);
  }
});
