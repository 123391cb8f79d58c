// The panels' shared base: it reads when opened, reads again on a relevant event (only while
// open, unless the panel follows events closed), folds reads asked for meanwhile into one more,
// says why a read failed, hands a 401 to sign-in, and forgets everything on sign-out.
import assert from "node:assert/strict";
import { mock, test } from "node:test";

import { HttpError } from "../../client/js/api.js";
import { Panel, showStatus } from "../../client/js/panel.js";

/** Just what the base touches of an element: hidden, attributes, listeners, focus. */
class El {
  constructor(hidden = false) {
    this.hidden = hidden;
    this.attrs = {};
    this.listeners = {};
    this.focused = 0;
    this.dataset = {};
    this.textContent = "";
  }
  setAttribute(name, value) {
    this.attrs[name] = String(value);
  }
  addEventListener(type, fn) {
    (this.listeners[type] ||= []).push(fn);
  }
  fire(type, event = {}) {
    for (const fn of this.listeners[type] || []) fn(event);
  }
  focus() {
    this.focused += 1;
  }
}

/** A promise settled from outside: the test decides when the API answers. */
function answer() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

class ListPanel extends Panel {
  constructor(options = {}) {
    const hooks = { unauthorized: 0, onUnauthorized: () => (hooks.unauthorized += 1) };
    super(hooks, { button: new El(), sheet: new El(true), closer: new El() }, { debounceMs: 150, ...options });
    this.list = [];
    this.reads = []; // one pending answer per read asked
    this.renders = 0;
  }
  load() {
    const a = answer();
    this.reads.push(a);
    return a.promise;
  }
  apply(body) {
    this.list = body.items;
  }
  render() {
    this.renders += 1;
  }
  relevant(ev) {
    return ev.kind.startsWith("thing.");
  }
  errorText(err) {
    return `Things could not be loaded: ${err.message}`;
  }
  reset() {
    this.list = [];
  }
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

test("opening shows the sheet, marks the button expanded, and reads", async () => {
  const panel = new ListPanel();
  panel.els.button.fire("click");
  assert.equal(panel.isOpen, true);
  assert.equal(panel.els.button.attrs["aria-expanded"], "true");
  assert.equal(panel.reads.length, 1);
  assert.equal(panel.statusText(true, "Nothing yet."), "Loading…");
  panel.reads[0].resolve({ items: ["a"] });
  await settle();
  assert.deepEqual(panel.list, ["a"]);
  assert.equal(panel.loaded, true);
  assert.equal(panel.statusText(false, "Nothing yet."), "");
  assert.equal(panel.statusText(true, "Nothing yet."), "Nothing yet.");
  panel.els.button.fire("click");
  assert.equal(panel.isOpen, false);
  assert.equal(panel.els.button.attrs["aria-expanded"], "false");
});

test("a relevant event reads again once the burst settles, only while open", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const panel = new ListPanel();
  panel.eventArrived({ kind: "thing.changed" });
  t.mock.timers.tick(1000);
  assert.equal(panel.reads.length, 0, "closed: no read");
  panel.open();
  panel.reads[0].resolve({ items: [] });
  await settle();
  panel.eventArrived({ kind: "other.changed" });
  t.mock.timers.tick(1000);
  assert.equal(panel.reads.length, 1, "an unrelated event reads nothing");
  panel.eventArrived({ kind: "thing.changed" });
  t.mock.timers.tick(100);
  panel.eventArrived({ kind: "thing.changed" });
  t.mock.timers.tick(149);
  assert.equal(panel.reads.length, 1, "still inside the burst");
  t.mock.timers.tick(1);
  assert.equal(panel.reads.length, 2, "one read for the burst");
});

test("a panel that follows events closed reads on them while closed too", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const panel = new ListPanel({ whileClosed: true });
  panel.eventArrived({ kind: "thing.changed" });
  t.mock.timers.tick(150);
  assert.equal(panel.reads.length, 1);
  assert.equal(panel.isOpen, false);
});

test("reads asked for while one runs become one more read after it", async () => {
  const panel = new ListPanel();
  panel.open();
  panel.refresh();
  panel.refresh();
  assert.equal(panel.reads.length, 1);
  panel.reads[0].resolve({ items: ["old"] });
  await settle();
  assert.equal(panel.reads.length, 2);
  panel.reads[1].resolve({ items: ["new"] });
  await settle();
  assert.deepEqual(panel.list, ["new"]);
  assert.equal(panel.reads.length, 2);
});

test("a failed read says why; the next good one clears it", async () => {
  const panel = new ListPanel();
  panel.open();
  panel.reads[0].reject(new HttpError(503, { error: { code: "unavailable", message: "memory is down" } }));
  await settle();
  assert.equal(panel.error, "Things could not be loaded: memory is down");
  assert.equal(panel.statusText(true, "Nothing yet."), "Things could not be loaded: memory is down");
  const status = new El();
  showStatus(status, panel.statusText(true, "Nothing yet."), Boolean(panel.error));
  assert.equal(status.hidden, false);
  assert.equal(status.dataset.tone, "warn");
  panel.refresh();
  panel.reads[1].resolve({ items: ["a"] });
  await settle();
  assert.equal(panel.error, null);
  showStatus(status, panel.statusText(false, "Nothing yet."), Boolean(panel.error));
  assert.equal(status.hidden, true);
  assert.equal(status.dataset.tone, "");
});

test("a 401 goes to sign-in and is not shown as an error", async () => {
  const panel = new ListPanel();
  panel.open();
  panel.reads[0].reject(new HttpError(401, null));
  await settle();
  assert.equal(panel.hooks.unauthorized, 1);
  assert.equal(panel.error, null);
});

test("signing out forgets everything, closes, and a late answer of the old sign-in changes nothing", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const panel = new ListPanel();
  panel.open();
  panel.reads[0].resolve({ items: ["mine"] });
  await settle();
  panel.refresh();
  panel.eventArrived({ kind: "thing.changed" }); // a read due later
  panel.clear();
  assert.deepEqual(panel.list, []);
  assert.equal(panel.loaded, false);
  assert.equal(panel.isOpen, false);
  t.mock.timers.tick(1000);
  assert.equal(panel.reads.length, 2, "the pending debounced read was dropped");
  panel.reads[1].resolve({ items: ["someone else's"] });
  await settle();
  assert.deepEqual(panel.list, []);
  assert.equal(panel.loaded, false);
});

test("a read asked for after sign-out, while the old sign-in's read still runs, is made and shown", async () => {
  const panel = new ListPanel();
  panel.open();
  panel.clear(); // signed out with the first read still out
  panel.open(); // signed in again: this read is the new session's own
  assert.equal(panel.reads.length, 2, "the new session reads at once, not after the old read");
  panel.reads[0].resolve({ items: ["old"] });
  await settle();
  assert.deepEqual(panel.list, []);
  panel.reads[1].resolve({ items: ["new"] });
  await settle();
  assert.deepEqual(panel.list, ["new"]);
  assert.equal(panel.loaded, true);
  panel.refresh(); // and the panel is not left thinking a read is out
  assert.equal(panel.reads.length, 3);
});

test("Escape and the close button return focus to the topbar button when the panel asks for it", () => {
  const panel = new ListPanel({ keyboard: true });
  panel.open();
  const escape = { key: "Escape", defaultPrevented: false, preventDefault: mock.fn() };
  panel.els.sheet.fire("keydown", escape);
  assert.equal(panel.isOpen, false);
  assert.equal(escape.preventDefault.mock.callCount(), 1);
  assert.equal(panel.els.button.focused, 1);
  panel.open();
  panel.els.closer.fire("click");
  assert.equal(panel.isOpen, false);
  assert.equal(panel.els.button.focused, 2);
  const plain = new ListPanel();
  plain.open();
  plain.els.closer.fire("click");
  assert.equal(plain.els.button.focused, 0);
});
