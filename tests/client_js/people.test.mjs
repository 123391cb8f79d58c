// The People and Commitments panels' data (issue #30): what a person's line says, how
// commitments group into due soon / open / done, and which events make the panels ask again.
import assert from "node:assert/strict";
import { test } from "node:test";

import { groupCommitments, refreshesCommitments } from "../../client/js/commitments-ui.js";
import { personMeta, refreshesPeople } from "../../client/js/people-ui.js";

const NOW = new Date("2026-12-06T09:00:00Z");

function c(id, fields) {
  return { id, by: "owner", what: id, state: "open", due: null, closed_at: null, ...fields };
}

test("a person's line: relation, contact points and key dates, in that order", () => {
  const meta = personMeta({
    relation: "sister", phones: ["+351 912 345 678"], emails: ["ana@ex.org"], dates: [{ label: "birthday", date: "03-14" }],
  });
  assert.match(meta, /^sister · \+351 912 345 678 · ana@ex\.org · birthday 14 March$|^sister · \+351 912 345 678 · ana@ex\.org · birthday March 14$/);
  assert.equal(personMeta({ phones: [], emails: [], dates: [] }), "");
  assert.equal(personMeta({ relation: "friend", phones: [], emails: [], dates: [], contacts: "unlisted" }),
    "friend · no longer in contacts");
  assert.equal(personMeta({ phones: [], emails: [], dates: [], contacts: "listed" }), "");
});

test("commitments: due within 48 h or overdue is due soon, the rest open, closed ones done newest first", () => {
  const groups = groupCommitments(
    [
      c("overdue", { due: "2026-12-05T09:00:00Z" }),
      c("tomorrow", { due: "2026-12-07T09:00:00Z" }),
      c("next-week", { due: "2026-12-13T09:00:00Z" }),
      c("undated", {}),
      c("kept-old", { state: "kept", closed_at: "2026-12-01T09:00:00Z" }),
      c("dropped-new", { state: "dropped", closed_at: "2026-12-04T09:00:00Z" }),
    ],
    NOW,
  );
  assert.deepEqual(groups.soon.map((x) => x.id), ["overdue", "tomorrow"]);
  assert.deepEqual(groups.open.map((x) => x.id), ["next-week", "undated"]);
  assert.deepEqual(groups.done.map((x) => x.id), ["dropped-new", "kept-old"]);
});

test("the panels ask again on their own events only", () => {
  assert.ok(refreshesPeople({ kind: "person.added" }) && refreshesPeople({ kind: "person.forgotten" }));
  assert.ok(!refreshesPeople({ kind: "message" }) && !refreshesPeople(null));
  assert.ok(refreshesCommitments({ kind: "commitment.kept" }) && !refreshesCommitments({ kind: "person.added" }));
});
