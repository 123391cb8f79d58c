// The Memory panel's data and rows, and the whole-timeline search's results: what shows, in
// what order, how it reads, where "show source" and a result jump to.
import assert from "node:assert/strict";
import { test } from "node:test";

import { formatTime } from "../../client/js/format.js";
import {
  factGroups,
  factMatches,
  factRow,
  factSource,
  factsFrom,
  kindLabel,
  refreshesMemory,
  resultMeta,
  resultRow,
  resultTarget,
  resultsFrom,
  retiredText,
} from "../../client/js/memory.js";
import { elements, fakeDocument } from "./fakedom.mjs";

const NOW = new Date("2026-01-05T09:00:00Z");

function fact(id, text, fields = {}) {
  return {
    id,
    type: "fact",
    text,
    status: "active",
    valid_at: "2026-01-04T10:00:00Z",
    invalid_at: null,
    superseded_by: null,
    supersedes: [],
    event_ids: [`ev-${id}`],
    refs: [],
    origin: "turn",
    created_at: "2026-01-04T10:00:00Z",
    updated_at: "2026-01-04T10:00:00Z",
    history: [],
    ...fields,
  };
}

function listeningDocument() {
  const doc = fakeDocument();
  const make = doc.createElement;
  doc.createElement = (tag) => {
    const el = make(tag);
    el.listeners = {};
    el.addEventListener = (type, fn) => {
      el.listeners[type] = fn;
    };
    return el;
  };
  return doc;
}

function withDocument(fn) {
  globalThis.document = listeningDocument();
  try {
    fn();
  } finally {
    delete globalThis.document;
  }
}

const byClass = (root, cls) => elements(root).find((el) => el.className.split(" ").includes(cls));

test("the answer's facts and results; anything malformed is left out", () => {
  const body = { facts: [fact("a", "x"), { id: "b" }, null, { text: "no id" }] };
  assert.deepEqual(factsFrom(body).map((f) => f.id), ["a"]);
  assert.deepEqual(factsFrom([fact("c", "y")]).map((f) => f.id), ["c"], "a bare list is read too");
  assert.deepEqual(factsFrom(null), []);
  const results = resultsFrom({ results: [{ kind: "fact", id: "f", text: "t" }, { kind: "message" }, "junk"] });
  assert.deepEqual(results.map((r) => r.id), ["f"]);
  assert.deepEqual(resultsFrom({}), []);
});

test("groups: adaptations first, active only unless history is shown, newest first, retired last", () => {
  const facts = [
    fact("old", "Sister lives in Lisbon", { status: "superseded", valid_at: "2026-01-01T10:00:00Z", superseded_by: "new" }),
    fact("new", "Sister lives in Porto", { valid_at: "2026-01-03T10:00:00Z", supersedes: ["old"] }),
    fact("older", "Has a cat", { valid_at: "2026-01-02T10:00:00Z" }),
    fact("gone", "Likes jazz", { type: "preference", status: "forgotten" }),
    fact("tea", "Prefers tea", { type: "preference" }),
    fact("brief", "Answer briefly", { type: "adaptation" }),
    fact("call", "Will call mum on Sunday", { type: "commitment" }),
    fact("odd", "Unknown type", { type: "something-new", valid_at: "2026-01-01T09:00:00Z" }),
  ];
  const active = factGroups(facts);
  assert.deepEqual(
    active.map((g) => [g.type, g.label, g.facts.map((f) => f.id)]),
    [
      ["adaptation", "How you like to be answered", ["brief"]],
      ["preference", "Preferences", ["tea"]],
      ["commitment", "Commitments", ["call"]],
      ["fact", "Facts", ["new", "older", "odd"]],
    ],
  );
  const all = factGroups(facts, { history: true });
  assert.deepEqual(all.find((g) => g.type === "fact").facts.map((f) => f.id), ["new", "older", "odd", "old"]);
  assert.deepEqual(all.find((g) => g.type === "preference").facts.map((f) => f.id), ["tea", "gone"]);
  // A search narrows to its matches, in its order; retired matches only with history.
  const only = factGroups(facts, { only: ["older", "old", "new"] });
  assert.deepEqual(only.map((g) => g.facts.map((f) => f.id)), [["older", "new"]]);
  assert.deepEqual(factGroups(facts, { only: ["old"], history: true })[0].facts.map((f) => f.id), ["old"]);
  assert.deepEqual(factGroups(facts, { only: [] }), []);
});

test("a search's fact ids, best first, once each; episodes and messages are not facts", () => {
  const results = [
    { kind: "message", id: "m1", text: "a" },
    { kind: "fact", id: "f2", text: "b" },
    { kind: "episode", id: "e1", text: "c" },
    { kind: "fact", id: "f1", text: "d" },
    { kind: "fact", id: "f2", text: "b" },
  ];
  assert.deepEqual(factMatches(results), ["f2", "f1"]);
});

test("a retired fact says what replaced it and since when, or that it was forgotten", () => {
  const next = fact("new", "Sister lives in Porto");
  const old = fact("old", "Sister lives in Lisbon", { status: "superseded", superseded_by: "new", invalid_at: "2026-01-05T08:00:00Z" });
  const byId = new Map([["new", next]]);
  assert.equal(retiredText(old, byId, NOW), `replaced by “Sister lives in Porto” · no longer true since ${formatTime("2026-01-05T08:00:00Z", NOW)}`);
  assert.equal(retiredText({ ...old, invalid_at: null }, new Map(), NOW), "replaced");
  const forgotten = fact("f", "Likes jazz", {
    status: "forgotten",
    updated_at: "2026-01-05T08:30:00Z",
    history: [{ kind: "memory.fact.added", ts: "2026-01-01T08:00:00Z" }, { kind: "memory.fact.forgotten", ts: "2026-01-05T08:15:00Z" }],
  });
  assert.equal(retiredText(forgotten, byId, NOW), `forgotten · ${formatTime("2026-01-05T08:15:00Z", NOW)}`);
  assert.equal(retiredText({ ...forgotten, history: [] }, byId, NOW), `forgotten · ${formatTime("2026-01-05T08:30:00Z", NOW)}`);
  assert.equal(retiredText(next, byId, NOW), "");
});

test("where show source and a search result jump: first citation, an episode's first turn, the message itself", () => {
  assert.equal(factSource(fact("a", "x", { event_ids: ["e1", "e2"] })), "e1");
  assert.equal(factSource(fact("a", "x", { event_ids: [] })), null);
  assert.equal(factSource({}), null);
  assert.equal(resultTarget({ kind: "fact", id: "f1", event_ids: ["e7", "e8"] }), "e7");
  assert.equal(resultTarget({ kind: "fact", id: "f1", event_ids: [] }), null, "a fact's id is not an event");
  assert.equal(resultTarget({ kind: "episode", id: "x1", event_ids: ["t1", "t2", "t3"] }), "t1");
  assert.equal(resultTarget({ kind: "episode", id: "x1", event_ids: [] }), "x1", "no turns: the episode's own event");
  assert.equal(resultTarget({ kind: "message", id: "m1", event_ids: ["m1"] }), "m1");
  assert.equal(resultTarget(null), null);
});

test("which timeline events mean the facts may have changed", () => {
  for (const kind of ["memory.fact.added", "memory.fact.cited", "memory.fact.edited", "memory.fact.forgotten"]) assert.ok(refreshesMemory({ kind }), kind);
  assert.ok(!refreshesMemory({ kind: "memory.retrieved" }));
  assert.ok(!refreshesMemory({ kind: "message" }));
  assert.ok(!refreshesMemory(null));
});

test("a result's line: time, speaker, channel, and a fact's type", () => {
  const ts = "2026-01-05T08:00:00Z";
  assert.equal(resultMeta({ kind: "message", ts, speaker: "Caroline", channel: "sms" }, NOW), `${formatTime(ts, NOW)} · Caroline · SMS`);
  assert.equal(resultMeta({ kind: "fact", ts, type: "preference" }, NOW), `${formatTime(ts, NOW)} · preference`);
  assert.equal(resultMeta({ kind: "fact", type: "fact" }, NOW), "");
  assert.equal(kindLabel("episode"), "Episode");
});

test("a fact row: text as text, type and time, Edit / Forget / Show source naming it", () => {
  withDocument(() => {
    const hostile = '<img src=x onerror="alert(1)"> My sister lives in <b>Lisbon</b>';
    const calls = [];
    const on = {
      edit: (f) => calls.push(["edit", f.id]),
      confirm: (f) => calls.push(["confirm", f.id]),
      source: (f, id) => calls.push(["source", f.id, id]),
    };
    const row = factRow(fact("f1", hostile, { event_ids: ["e1", "e2"] }), { now: NOW, on });
    assert.equal(row.getAttribute("data-fact-id"), "f1");
    assert.equal(row.getAttribute("data-status"), "active");
    assert.equal(byClass(row, "memory-text").textContent, hostile);
    assert.equal(byClass(row, "memory-type").textContent, "fact");
    assert.equal(byClass(row, "memory-when").getAttribute("datetime"), "2026-01-04T10:00:00Z");
    assert.ok(!elements(row).some((el) => ["IMG", "B"].includes(el.tagName)));
    assert.equal(byClass(row, "memory-edit").getAttribute("aria-label"), `Edit: ${hostile}`);
    byClass(row, "memory-edit").listeners.click();
    byClass(row, "memory-forget").listeners.click();
    byClass(row, "memory-source").listeners.click();
    assert.deepEqual(calls, [["edit", "f1"], ["confirm", "f1"], ["source", "f1", "e1"]]);
    // No citation: Show source is there but disabled.
    const bare = factRow(fact("f2", "x", { event_ids: [] }), { now: NOW, on });
    assert.equal(byClass(bare, "memory-source").getAttribute("disabled"), "");
  });
});

test("a retired row: struck through (said in words too), no Edit or Forget, still a source", () => {
  withDocument(() => {
    const next = fact("new", "Sister lives in Porto");
    const old = fact("old", "Sister lives in Lisbon", { status: "superseded", superseded_by: "new", invalid_at: "2026-01-05T08:00:00Z" });
    const row = factRow(old, { byId: new Map([["new", next]]), now: NOW, mode: "edit" });
    assert.ok(row.className.includes("memory-superseded"));
    assert.ok(row.textContent.startsWith("Replaced: Sister lives in Lisbon"));
    assert.ok(byClass(row, "memory-retired").textContent.startsWith("replaced by “Sister lives in Porto”"));
    assert.equal(byClass(row, "memory-edit"), undefined, "a retired fact is not edited");
    assert.equal(byClass(row, "memory-forget"), undefined);
    assert.equal(byClass(row, "memory-edit-text"), undefined, "edit mode does not apply to it");
    assert.ok(byClass(row, "memory-source"));
  });
});

test("edit mode: a labelled box with the draft, a type choice, Save / Cancel, Enter saves and Escape cancels", () => {
  withDocument(() => {
    const calls = [];
    const on = {
      save: (f, text, type) => calls.push(["save", f.id, text, type]),
      cancel: (f) => calls.push(["cancel", f.id]),
      draft: (f, text) => calls.push(["draft", f.id, text]),
    };
    const row = factRow(fact("f1", "Sister lives in Lisbon"), { now: NOW, mode: "edit", draft: "Sister lives in Porto", draftType: "fact", error: "That memory changed meanwhile", on });
    const box = byClass(row, "memory-edit-text");
    assert.equal(box.value, "Sister lives in Porto");
    const label = elements(row).find((el) => el.tagName === "LABEL" && el.getAttribute("for") === box.getAttribute("id"));
    assert.equal(label.textContent, "Fact text");
    const select = byClass(row, "memory-edit-type");
    const options = elements(select).map((o) => [o.getAttribute("value"), o.getAttribute("selected")]);
    assert.deepEqual(options, [["adaptation", null], ["preference", null], ["commitment", null], ["fact", ""]]);
    select.value = "preference";
    byClass(row, "memory-save").listeners.click();
    box.listeners.input();
    let prevented = 0;
    let stopped = 0;
    const key = (k, extra = {}) => ({ key: k, shiftKey: false, isComposing: false, preventDefault: () => (prevented += 1), stopPropagation: () => (stopped += 1), ...extra });
    box.listeners.keydown(key("Enter"));
    box.listeners.keydown(key("Enter", { shiftKey: true })); // a new line, not a save
    box.listeners.keydown(key("Escape"));
    byClass(row, "memory-cancel").listeners.click();
    assert.deepEqual(calls, [
      ["save", "f1", "Sister lives in Porto", "preference"],
      ["draft", "f1", "Sister lives in Porto"],
      ["save", "f1", "Sister lives in Porto", "preference"],
      ["cancel", "f1"],
      ["cancel", "f1"],
    ]);
    assert.equal(prevented, 2);
    assert.equal(stopped, 1, "Escape in the box ends the edit, not the panel");
    const error = byClass(row, "memory-error");
    assert.equal(error.getAttribute("role"), "alert");
    assert.equal(error.textContent, "That memory changed meanwhile");
    const busy = factRow(fact("f1", "x"), { now: NOW, mode: "edit", busy: true });
    assert.equal(byClass(busy, "memory-save").textContent, "Saving…");
    assert.equal(byClass(busy, "memory-save").getAttribute("disabled"), "");
  });
});

test("confirm mode: forgetting asks first, inline, and names the fact", () => {
  withDocument(() => {
    const calls = [];
    const on = { forget: (f) => calls.push(["forget", f.id]), cancel: (f) => calls.push(["cancel", f.id]) };
    const row = factRow(fact("f1", "Likes jazz"), { now: NOW, mode: "confirm", on });
    assert.equal(byClass(row, "memory-confirm-text").textContent, "Forget this? Delegate will not use it again.");
    assert.equal(byClass(row, "memory-forget-yes").getAttribute("aria-label"), "Forget: Likes jazz");
    assert.equal(byClass(row, "memory-edit"), undefined);
    byClass(row, "memory-forget-yes").listeners.click();
    byClass(row, "memory-forget-no").listeners.click();
    assert.deepEqual(calls, [["forget", "f1"], ["cancel", "f1"]]);
  });
});

test("a search result: kind badge, text as text, its line, and a click that jumps to its target", () => {
  withDocument(() => {
    const jumps = [];
    const hostile = "<script>alert(1)</script> the Lisbon flight";
    const ts = "2026-01-05T08:00:00Z";
    const row = resultRow({ kind: "episode", id: "x1", text: hostile, ts, event_ids: ["t1", "t2"], channel: "phone" }, { now: NOW, onJump: (t, r) => jumps.push([t, r.id]) });
    assert.equal(row.getAttribute("data-kind"), "episode");
    assert.equal(row.getAttribute("data-target"), "t1");
    assert.equal(byClass(row, "kind-badge").textContent, "Episode");
    assert.equal(byClass(row, "search-result-text").textContent, hostile);
    assert.equal(byClass(row, "search-result-meta").textContent, `${formatTime(ts, NOW)} · Phone`);
    assert.ok(!elements(row).some((el) => el.tagName === "SCRIPT"));
    byClass(row, "search-result-btn").listeners.click();
    assert.deepEqual(jumps, [["t1", "x1"]]);
    const nowhere = resultRow({ kind: "fact", id: "f", text: "x", event_ids: [] }, { now: NOW });
    assert.equal(byClass(nowhere, "search-result-btn").getAttribute("disabled"), "");
  });
});
