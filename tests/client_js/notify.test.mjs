// The in-page notices (client/js/notify.js) say what the pollers' pushes say about the same
// event: both read tests/support/notice_cases.json.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { noticeFor } from "../../client/js/notify.js";

const cases = JSON.parse(readFileSync(new URL("../support/notice_cases.json", import.meta.url), "utf8"));

for (const c of cases) {
  test(`notice: ${c.why}`, () => {
    const ev = { id: "0193-000001", ts: "2026-12-06T06:00:00Z", conversation_id: "c", span_id: null, role: null, ...c.event };
    const notice = noticeFor(ev);
    if (c.notice === null) {
      assert.equal(notice, null);
      return;
    }
    assert.deepEqual({ title: notice.title, body: notice.body }, { title: c.notice.title, body: c.notice.body });
    assert.equal(notice.tag, ev.id);
  });
}
