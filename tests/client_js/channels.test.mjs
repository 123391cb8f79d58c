// SMS and email on the timeline: the delivery merge rule, attachments, refused notices,
// and how buildView hangs delivery/attachment events on the message they are about.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  attachmentText,
  deliveryRank,
  formatBytes,
  mergeDelivery,
  messageAttachments,
  messageHeader,
  refusedText,
} from "../../client/js/channels.js";
import { innerSummary } from "../../client/js/inner-words.js";
import { attachmentItems, deliveryNode } from "../../client/js/message-node.js";
import { refusedNode } from "../../client/js/timeline-rows.js";
import { searchEvents } from "../../client/js/search.js";
import { isHiddenKind } from "../../client/js/event-kinds.js";
import { addEvents, createTimeline, mergePage } from "../../client/js/timeline.js";
import { attachedTo, buildView } from "../../client/js/timeline-view.js";
import { elements, fakeDocument, serialize } from "./fakedom.mjs";
import { at, botMsg, ev, userMsg } from "./helpers.mjs";

const OUT = "0193-answer";

function delivery(status, fields = {}) {
  const { payload, ...rest } = fields;
  return ev("delivery", {
    parent_id: OUT,
    channel: "sms",
    ...rest,
    payload: { outbox_id: OUT, channel: "sms", status, external_ids: [], final: false, ...(payload || {}) },
  });
}

/** Every order of a list (the merge must not depend on the order events arrive in). */
function permutations(list) {
  if (list.length <= 1) return [list];
  return list.flatMap((x, i) => permutations([...list.slice(0, i), ...list.slice(i + 1)]).map((rest) => [x, ...rest]));
}

function statusOf(events) {
  const d = mergeDelivery(events);
  return d && d.status;
}

test("the most advanced status wins, whatever order the events arrive in", () => {
  const sending = delivery("sending", { payload: { attempt: 1 } });
  const sent = delivery("sent", { payload: { external_ids: ["SM1"] } });
  const queued = delivery("queued");
  const delivered = delivery("delivered");
  const read = delivery("read");
  for (const order of permutations([sending, sent, queued, delivered])) assert.equal(statusOf(order), "delivered");
  for (const order of permutations([sending, sent, read, delivered])) assert.equal(statusOf(order), "read");
  assert.equal(statusOf([sending]), "sending");
  assert.equal(statusOf([sent, sending]), "sent", "a replayed 'sending' does not undo 'sent'");
  assert.equal(statusOf([]), null);
  assert.equal(mergeDelivery(undefined), null);
  assert.ok(deliveryRank("sending") < deliveryRank("sent"));
  assert.equal(deliveryRank("sent"), deliveryRank("queued"));
  assert.equal(deliveryRank("queued"), deliveryRank("accepted"));
  assert.equal(deliveryRank("accepted"), deliveryRank("scheduled"));
  assert.ok(deliveryRank("scheduled") < deliveryRank("delivered"));
  assert.ok(deliveryRank("delivered") < deliveryRank("read"));
});

test("failed and undelivered are terminal: no later or earlier event moves them back", () => {
  const sending = delivery("sending", { payload: { attempt: 1 } });
  const sent = delivery("sent");
  const delivered = delivery("delivered");
  const undelivered = delivery("undelivered", { payload: { error: "Unknown destination handset", error_code: "30005" } });
  for (const order of permutations([sending, sent, undelivered, delivered])) {
    const d = mergeDelivery(order);
    assert.equal(d.status, "undelivered");
    assert.equal(d.tone, "bad");
    assert.equal(d.text, "⚠ not delivered: Unknown destination handset, code 30005");
  }
  const failed = delivery("failed", { payload: { error: "21610: unsubscribed recipient", final: true } });
  for (const order of permutations([sending, failed, delivery("sending", { payload: { attempt: 2 } })])) {
    assert.equal(mergeDelivery(order).text, "⚠ failed: 21610: unsubscribed recipient");
  }
  // The reason survives even when the winning event carries none.
  const bare = delivery("failed");
  assert.equal(mergeDelivery([bare, delivery("undelivered", { payload: { error: "carrier said no" } })]).status, "failed");
  assert.equal(mergeDelivery([delivery("undelivered", { payload: { error: "carrier said no" } }), bare]).error, "carrier said no");
  assert.equal(mergeDelivery([bare]).text, "⚠ failed");
  assert.match(mergeDelivery([bare]).label, /^Delivery: failed/);
});

test("unknown is shown as such until the provider confirms it has the message", () => {
  const sending = delivery("sending", { payload: { attempt: 1 } });
  const unknown = delivery("unknown", { payload: { error: "timed out waiting for Twilio" } });
  for (const order of permutations([sending, unknown])) {
    const d = mergeDelivery(order);
    assert.equal(d.status, "unknown");
    assert.equal(d.text, "? delivery unknown");
    assert.equal(d.tone, "unknown");
    assert.match(d.title, /could not confirm/);
  }
  // A status callback is evidence the provider took it; a failure still outranks everything.
  assert.equal(statusOf([unknown, delivery("delivered")]), "delivered");
  assert.equal(statusOf([delivery("delivered"), unknown]), "delivered");
  assert.equal(statusOf([unknown, delivery("undelivered")]), "undelivered");
});

test("words on every status; the latest attempt of a retried send", () => {
  const cases = [
    ["sending", "… sending", "pending"],
    ["sent", "✓ sent", "ok"],
    ["queued", "✓ queued", "ok"],
    ["accepted", "✓ accepted", "ok"],
    ["scheduled", "✓ scheduled", "ok"],
    ["partially_delivered", "✓ partly delivered", "warn"],
    ["delivered", "✓✓ delivered", "done"],
    ["read", "✓✓ read", "done"],
    ["canceled", "⚠ canceled", "bad"],
    ["unknown", "? delivery unknown", "unknown"],
  ];
  for (const [status, text, tone] of cases) {
    const d = mergeDelivery([delivery(status)]);
    assert.equal(d.text, text, status);
    assert.equal(d.tone, tone, status);
    assert.equal(`${d.symbol} ${d.words}`, d.text);
    assert.ok(d.label.startsWith("Delivery: "), "a spoken label, not only a symbol");
  }
  const retry = mergeDelivery([delivery("sending", { payload: { attempt: 2 } }), delivery("sending", { payload: { attempt: 1 } })]);
  assert.equal(retry.text, "… sending (attempt 2)");
  const parts = mergeDelivery([delivery("sent", { payload: { parts: 3 } })]);
  assert.match(parts.title, /SMS sent · 3 parts/);
  const mail = mergeDelivery([delivery("sent", { channel: "email", payload: { channel: "email" } })]);
  assert.match(mail.title, /^Email sent/);
  // Statuses this client does not know are ignored, not shown as something else.
  assert.equal(mergeDelivery([delivery("teleported")]), null);
});

test("sizes read like people write them", () => {
  assert.equal(formatBytes(0), "0 B");
  assert.equal(formatBytes(512), "512 B");
  assert.equal(formatBytes(1536), "1.5 KB");
  assert.equal(formatBytes(20 * 1024), "20 KB");
  assert.equal(formatBytes(5 * 1024 * 1024 + 1), "5.0 MB");
  assert.equal(formatBytes(3 * 1024 ** 3), "3.0 GB");
  assert.equal(formatBytes(-1), "");
  assert.equal(formatBytes(NaN), "");
});

test("email attachments from meta, completed by attachment.stored events", () => {
  const mail = userMsg("see attached", {
    channel: "email",
    payload: {
      meta: {
        from: "me@example.org",
        subject: "Trip plans",
        attachments: [
          { name: "itinerary.pdf", content_type: "application/pdf", size: 48213, path: "att/1/itinerary.pdf", stored: true },
          { name: "huge.mov", content_type: "video/quicktime", size: 900000000, path: null, stored: false },
        ],
      },
    },
  });
  const stored = ev("attachment.stored", {
    parent_id: mail.id,
    payload: { name: "huge.mov", content_type: "video/quicktime", size: 900000000, stored: false, reason: "larger than 25 MB" },
  });
  const files = messageAttachments(mail, [stored]);
  assert.deepEqual(files, [
    { name: "itinerary.pdf", content_type: "application/pdf", size: 48213, stored: true, reason: null },
    { name: "huge.mov", content_type: "video/quicktime", size: 900000000, stored: false, reason: "larger than 25 MB" },
  ]);
  assert.deepEqual(attachmentText(files[0]), {
    name: "itinerary.pdf",
    details: "application/pdf, 47 KB",
    status: "",
    label: "Attachment itinerary.pdf, application/pdf, 47 KB",
  });
  assert.equal(attachmentText(files[1]).status, "not stored: larger than 25 MB");
  assert.deepEqual(messageHeader(mail), { from: "me@example.org", subject: "Trip plans" });
});

test("MMS media match their attachment.stored events by url, else by type; strays are listed too", () => {
  const sms = userMsg("look", {
    channel: "sms",
    payload: {
      meta: {
        from: "+15550100",
        message_sid: "SM1",
        media: [
          { url: "https://media.example/ME1", content_type: "image/jpeg" },
          { url: "https://media.example/ME2", content_type: "image/png" },
        ],
      },
    },
  });
  const byUrl = ev("attachment.stored", {
    parent_id: sms.id,
    payload: { name: "ME2.png", content_type: "image/png", size: 2048, url: "https://media.example/ME2", path: "media/ME2.png", stored: true },
  });
  const byType = ev("attachment.stored", { parent_id: sms.id, payload: { name: "ME1.jpg", content_type: "image/jpeg", size: 10, stored: true } });
  const stray = ev("attachment.stored", { parent_id: sms.id, payload: { name: "extra.txt", content_type: "text/plain", stored: false, reason: "download failed" } });
  const files = messageAttachments(sms, [stray, byType, byUrl]);
  assert.deepEqual(files.map((f) => [f.name, f.content_type, f.size, f.stored]), [
    ["ME1.jpg", "image/jpeg", 10, true],
    ["ME2.png", "image/png", 2048, true],
    ["extra.txt", "text/plain", null, false],
  ]);
  // Before any event: the content type names the item; nothing claims it was stored.
  const early = messageAttachments(sms, []);
  assert.deepEqual(attachmentText(early[0]), { name: "image/jpeg", details: "", status: "", label: "Attachment image/jpeg" });
  assert.equal(early[0].stored, null);
  // Hostile meta: wrong types are dropped, not rendered.
  const junk = userMsg("x", { channel: "email", payload: { meta: { attachments: [null, "a", { name: 5, size: "big" }], media: "nope", from: 7 } } });
  assert.deepEqual(messageAttachments(junk, []), [{ name: null, content_type: null, size: null, stored: null, reason: null }]);
  assert.deepEqual(messageHeader(junk), { from: "", subject: "" });
  assert.deepEqual(messageHeader(sms), { from: "+15550100", subject: "" });
  // The owner's side: an answer names no sender.
  assert.deepEqual(messageHeader(botMsg("ok", sms.id, { channel: "sms" })), { from: "", subject: "" });
});

test("a refused sender is a notice with the reason in words", () => {
  const sms = ev("inbound.refused", {
    span_id: null,
    channel: "sms",
    payload: { sender: "+15550199", reason: "not_owner", detail: "", external_id: "SM9", preview: "WIN A PRIZE now" },
  });
  assert.equal(refusedText(sms).text, "Refused an SMS from +15550199 (not the owner)");
  assert.equal(refusedText(sms).preview, "WIN A PRIZE now");
  const mail = ev("inbound.refused", {
    span_id: null,
    channel: "email",
    payload: { sender: "me@example.org", reason: "unauthenticated", detail: "dmarc=fail", subject: "Wire the money", preview: "" },
  });
  const r = refusedText(mail);
  assert.equal(r.text, "Refused an email from me@example.org (failed sender authentication)");
  assert.equal(r.subject, "Wire the money");
  assert.match(r.title, /dmarc=fail/);
  assert.equal(refusedText(ev("inbound.refused", { channel: "email", payload: { sender: "x", reason: "unreadable" } })).text, "Refused an email from x (could not be read)");
  assert.equal(innerSummary(mail).label, "Refused");
  assert.deepEqual(searchEvents([mail], "wire money").map((e) => e.id), [mail.id]);
});

test("a refusal from someone memory knows names them, and is still a refusal", () => {
  const known = ev("inbound.refused", {
    span_id: null,
    channel: "sms",
    payload: { sender: "+15550002222", reason: "not_owner", preview: "call me", person_id: "p1", person_name: "Ana Costa", person_relation: "sister" },
  });
  const r = refusedText(known);
  assert.equal(r.text, "Ana Costa (your sister) texted; not answered: only your own number is answered");
  assert.match(r.title, /From \+15550002222/);
  assert.equal(r.preview, "call me");
  const mail = ev("inbound.refused", { channel: "email", payload: { sender: "bo@ex.org", reason: "not_owner", person_name: "Bo" } });
  assert.equal(refusedText(mail).text, "Bo emailed; not answered: only your own address is answered");
  globalThis.document = fakeDocument();
  try {
    assert.match(serialize(refusedNode(known)), /Ana Costa \(your sister\) texted/);
  } finally {
    delete globalThis.document;
  }
});

test("buildView hangs delivery and attachment events on their message, loaded before or after it", () => {
  const u = userMsg("book it", { channel: "sms", seq: 1, ts: at(1) });
  const a = botMsg("Booked.", u.id, { channel: "sms", seq: 2, ts: at(2), id: OUT });
  const sent = delivery("sent", { seq: 3, ts: at(3) });
  const delivered = delivery("delivered", { seq: 4, ts: at(4), span_id: null });
  const orphan = delivery("sent", { parent_id: null, seq: 5, ts: at(5) });

  // Deliveries first (the newest page), the message on an older page.
  const tl = createTimeline();
  mergePage(tl, { events: [delivered, orphan], cursor: "older" });
  let view = buildView(tl);
  assert.deepEqual(view, [], "a delivery is never a row of its own, even before its message loads");
  mergePage(tl, { events: [u, a, sent], cursor: null }, { older: true });
  view = buildView(tl);
  const items = view[0].items;
  assert.deepEqual(items.map((i) => i.key), [`ev:${u.id}`, `ev:${a.id}`]);
  const answer = items[1];
  assert.deepEqual(attachedTo(answer, a.id).deliveries.map((e) => e.id).sort(), [sent.id, delivered.id].sort());
  assert.equal(mergeDelivery(attachedTo(answer, a.id).deliveries).status, "delivered");
  assert.deepEqual(attachedTo(items[0], u.id).deliveries, []);

  // The other way round: the message first, its delivery live afterwards.
  const tl2 = createTimeline();
  addEvents(tl2, [u, a]);
  assert.equal(buildView(tl2)[0].items[1].attached, undefined);
  addEvents(tl2, [delivered]);
  assert.equal(mergeDelivery(attachedTo(buildView(tl2)[0].items[1], a.id).deliveries).status, "delivered");

  // An attachment event joins its inbound message; mail.progress is bookkeeping, never shown.
  const mail = userMsg("see attached", { channel: "email", span_id: null, seq: 10, ts: at(10) });
  const file = ev("attachment.stored", { parent_id: mail.id, span_id: null, seq: 11, ts: at(11), payload: { name: "a.pdf", content_type: "application/pdf", stored: true } });
  const progress = ev("mail.progress", { span_id: null, seq: 12, ts: at(12), payload: { mailbox: "INBOX", uidvalidity: 1, uid: 4, outcome: "input" } });
  const tl3 = createTimeline();
  addEvents(tl3, [progress, file, mail]);
  const v3 = buildView(tl3);
  assert.deepEqual(v3.map((b) => b.key), [`ev:${mail.id}`]);
  assert.deepEqual(attachedTo(v3[0], mail.id).files.map((e) => e.id), [file.id]);
  assert.ok(isHiddenKind("mail.progress"));
  assert.equal(tl3.maxSeq, 12, "hidden and attached events still count for resuming");
  // Searching finds the message (by its attachment's name in meta), never the attached rows.
  assert.deepEqual(searchEvents(tl3.order, "a.pdf"), []);
});

test("a regenerated answer shows the delivery of the attempt on screen", () => {
  const u = userMsg("q", { span_id: null, channel: "sms" });
  const a1 = botMsg("first", u.id, { span_id: null, channel: "sms" });
  const a2 = ev("message", { role: "assistant", parent_id: u.id, span_id: null, channel: "sms", payload: { text: "second", regenerates: a1.id, attempt: 2 } });
  const d1 = delivery("delivered", { parent_id: a1.id, span_id: null });
  const d2 = delivery("failed", { parent_id: a2.id, span_id: null, payload: { error: "blocked" } });
  const tl = createTimeline();
  addEvents(tl, [u, a1, a2, d1, d2]);
  const answer = buildView(tl)[1];
  assert.deepEqual(answer.attempts.map((e) => e.id), [a1.id, a2.id]);
  assert.equal(mergeDelivery(attachedTo(answer, a1.id).deliveries).status, "delivered");
  assert.equal(mergeDelivery(attachedTo(answer, a2.id).deliveries).text, "⚠ failed: blocked");
});

test("the DOM pieces: text and labels only, never markup", () => {
  globalThis.document = fakeDocument();
  try {
    const d = mergeDelivery([delivery("failed", { payload: { error: "<b>nope</b>" } })]);
    const chip = deliveryNode(d);
    assert.equal(chip.textContent, "⚠ failed: <b>nope</b>");
    assert.equal(chip.getAttribute("aria-label"), "Delivery: failed — <b>nope</b>");
    assert.equal(chip.getAttribute("data-status"), "failed");
    assert.match(serialize(chip), /<span class="delivery-symbol" aria-hidden="true">⚠<\/span>/);
    assert.ok(!elements(chip).some((n) => n.tagName === "B"), "error text is text");

    const rows = attachmentItems([
      { name: "itinerary.pdf", content_type: "application/pdf", size: 2048, stored: true, reason: null },
      { name: "huge.mov", content_type: "video/quicktime", size: null, stored: false, reason: "too big" },
    ]);
    assert.deepEqual(rows.map((r) => r.textContent), ["itinerary.pdfapplication/pdf, 2.0 KB", "huge.movvideo/quicktimenot stored: too big"]);
    assert.equal(rows[1].className, "attachment not-stored");
    assert.equal(rows[1].getAttribute("aria-label"), "Attachment huge.mov, video/quicktime, not stored: too big");

    const refused = ev("inbound.refused", { span_id: null, channel: "sms", payload: { sender: "+15550199", reason: "not_owner", preview: "hi <script>" } });
    const note = refusedNode(refused);
    assert.equal(note.getAttribute("role"), "note");
    assert.equal(note.getAttribute("data-event-id"), refused.id);
    assert.equal(note.getAttribute("aria-label"), "Refused an SMS from +15550199 (not the owner)");
    assert.match(note.textContent, /Refused an SMS from \+15550199 \(not the owner\)“hi <script>”/);
    assert.ok(!elements(note).some((n) => n.tagName === "ARTICLE" || n.tagName === "SCRIPT"), "a notice, not a message bubble");
  } finally {
    delete globalThis.document;
  }
});
