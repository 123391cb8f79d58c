// SMS and email on the timeline: delivery status, attachments, refused senders.
// Pure functions over ledger events (no DOM); render.js decides how they look.
//
// Everything here reads untrusted text (a stranger's number, a mail subject, a file name):
// it is only ever returned as strings for textContent, never as markup.

import { clip } from "./format.js";
import { compareEvents } from "./timeline.js";

/**
 * How far a delivery got. Progress only moves forward: a late "sent" callback never undoes
 * "delivered", a replayed "sending" never undoes "sent". `unknown` (the sender could not tell
 * whether the provider took the message) sits just above "sending", so any later evidence
 * that the provider has it (a status callback) answers the question; the bad outcomes outrank
 * everything, so a message that failed or was not delivered stays visibly so.
 */
const RANK = {
  sending: 10,
  unknown: 15,
  sent: 20,
  queued: 20,
  accepted: 20,
  scheduled: 20,
  receiving: 20,
  received: 20,
  partially_delivered: 30,
  delivered: 40,
  read: 50,
  canceled: 90,
  undelivered: 95,
  failed: 100,
};

const BAD = new Set(["failed", "undelivered", "canceled"]);

const WORDS = {
  sending: ["…", "sending"],
  unknown: ["?", "delivery unknown"],
  sent: ["✓", "sent"],
  queued: ["✓", "queued"],
  accepted: ["✓", "accepted"],
  scheduled: ["✓", "scheduled"],
  receiving: ["✓", "received"],
  received: ["✓", "received"],
  partially_delivered: ["✓", "partly delivered"],
  delivered: ["✓✓", "delivered"],
  read: ["✓✓", "read"],
  canceled: ["⚠", "canceled"],
  undelivered: ["⚠", "not delivered"],
  failed: ["⚠", "failed"],
};

export function deliveryRank(status) {
  return RANK[status] ?? 0;
}

function str(v, max = 2000) {
  return typeof v === "string" && v ? v.slice(0, max) : null;
}

function attemptOf(ev) {
  const a = ev.payload && ev.payload.attempt;
  return Number.isInteger(a) && a > 0 ? a : 0;
}

/** Later of two events at the same rank: the higher attempt, then timeline order. */
function later(a, b) {
  const d = attemptOf(a) - attemptOf(b);
  if (d !== 0) return d > 0;
  return compareEvents(a, b) > 0;
}

/**
 * The one status a message shows, from all its `delivery` events in any arrival order:
 * {status, tone, symbol, word, words, text, label, title, error, error_code, attempt, parts, count},
 * or null when there are none. tone: "pending" | "ok" | "done" | "warn" | "bad" | "unknown".
 */
export function mergeDelivery(events) {
  let best = null;
  let error = null;
  let errorCode = null;
  let parts = null;
  let count = 0;
  for (const ev of events || []) {
    const p = (ev && ev.payload) || {};
    if (!(p.status in RANK)) continue;
    count += 1;
    if (Number.isInteger(p.parts) && p.parts > 0) parts = Math.max(parts || 0, p.parts);
    const r = RANK[p.status];
    if (!best || r > RANK[best.payload.status] || (r === RANK[best.payload.status] && later(ev, best))) best = ev;
  }
  if (!best) return null;
  const p = best.payload;
  const bad = BAD.has(p.status);
  // The error shown is the winning event's; a bad outcome without its own falls back to
  // another event's, so the reason is never lost to the order events arrived in.
  error = str(p.error);
  errorCode = str(p.error_code, 64);
  if (bad && !error) {
    for (const ev of events) {
      const q = ev.payload || {};
      if (BAD.has(q.status) && str(q.error)) {
        error = str(q.error);
        errorCode = errorCode || str(q.error_code, 64);
        break;
      }
    }
  }
  const [symbol, baseWord] = WORDS[p.status];
  const attempt = attemptOf(best) || null;
  let word = baseWord;
  if (p.status === "sending" && attempt && attempt > 1) word = `${baseWord} (attempt ${attempt})`;
  const tone = bad
    ? "bad"
    : p.status === "unknown"
      ? "unknown"
      : p.status === "sending"
        ? "pending"
        : p.status === "partially_delivered"
          ? "warn"
          : RANK[p.status] >= RANK.delivered
            ? "done"
            : "ok";
  const reason = [error, errorCode ? `code ${errorCode}` : null].filter(Boolean).join(", ");
  const words = bad && reason ? `${word}: ${reason}` : word;
  const text = `${symbol} ${words}`;
  const channel = p.channel === "email" ? "Email" : p.channel === "sms" ? "SMS" : "Message";
  const label = `Delivery: ${word}${bad && reason ? ` — ${reason}` : ""}`;
  const notes = [`${channel} ${word}`];
  if (parts && parts > 1) notes.push(`${parts} parts`);
  if (attempt) notes.push(`attempt ${attempt}`);
  if (p.status === "unknown") notes.push("the sender could not confirm whether it went out");
  if (reason) notes.push(reason);
  return {
    status: p.status,
    tone,
    symbol,
    word,
    words,
    text,
    label,
    title: notes.join(" · "),
    error,
    error_code: errorCode,
    attempt,
    parts,
    count,
  };
}

/** "512 B", "1.4 KB", "23 MB": binary units, one decimal below ten. */
export function formatBytes(n) {
  if (!Number.isFinite(n) || n < 0) return "";
  if (n < 1024) return `${Math.round(n)} B`;
  const units = ["KB", "MB", "GB", "TB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}

function fileFrom(raw) {
  if (!raw || typeof raw !== "object") return null;
  return {
    name: str(raw.name, 500),
    content_type: str(raw.content_type, 255),
    size: Number.isFinite(raw.size) && raw.size >= 0 ? raw.size : null,
    path: str(raw.path, 1000),
    url: str(raw.url, 2048),
    stored: typeof raw.stored === "boolean" ? raw.stored : null,
    reason: str(raw.reason, 500),
  };
}

function sameFile(entry, f) {
  if (f.url && entry.url) return f.url === entry.url;
  if (f.path && entry.path) return f.path === entry.path;
  return !!f.name && f.name === entry.name;
}

/**
 * What came with an inbound message: the media (SMS) or attachments (email) its meta lists,
 * completed by the `attachment.stored` events about it (stored or not, and why). An event
 * that matches no listed item (by url, path, then name; for unnamed MMS media by type) is
 * listed on its own. Returns [{name, content_type, size, stored, reason}] in a stable order.
 */
export function messageAttachments(ev, storedEvents = []) {
  const meta = (ev && ev.payload && ev.payload.meta) || {};
  const listed = [];
  for (const key of ["attachments", "media"]) {
    if (Array.isArray(meta[key])) for (const raw of meta[key]) {
      const f = fileFrom(raw);
      if (f) listed.push(f);
    }
  }
  const matched = new Set();
  const extra = [];
  for (const sev of [...(storedEvents || [])].sort(compareEvents)) {
    const f = fileFrom(sev.payload);
    if (!f) continue;
    let i = listed.findIndex((e, k) => !matched.has(k) && sameFile(e, f));
    if (i < 0) i = listed.findIndex((e, k) => !matched.has(k) && !e.name && e.content_type === f.content_type);
    if (i < 0) {
      extra.push(f);
      continue;
    }
    matched.add(i);
    const e = listed[i];
    listed[i] = {
      ...e,
      name: f.name || e.name,
      content_type: f.content_type || e.content_type,
      size: f.size ?? e.size,
      path: f.path || e.path,
      stored: f.stored ?? e.stored,
      reason: f.reason || e.reason,
    };
  }
  return listed.concat(extra).map(({ name, content_type, size, stored, reason }) => ({ name, content_type, size, stored, reason }));
}

/** One attachment as words: {name, details, status, label}. */
export function attachmentText(f) {
  const name = f.name || f.content_type || "attachment";
  const details = [f.name && f.content_type ? f.content_type : null, f.size !== null && f.size !== undefined ? formatBytes(f.size) : null].filter(Boolean).join(", ");
  const status = f.stored === false ? `not stored${f.reason ? `: ${f.reason}` : ""}` : "";
  const label = `Attachment ${name}${details ? `, ${details}` : ""}${status ? `, ${status}` : ""}`;
  return { name, details, status, label };
}

const REFUSED_REASONS = {
  not_owner: "not the owner",
  unauthenticated: "failed sender authentication",
  unreadable: "could not be read",
};

const REFUSED_VERBS = { sms: "texted", email: "emailed", voice: "called", phone: "called" };
const NOT_ANSWERED = {
  sms: "only your own number is answered",
  email: "only your own address is answered",
  voice: "only your own number is answered",
  phone: "only your own number is answered",
};

/**
 * A refusal from someone memory knows: "Ana Costa (your sister) texted; not answered: only your
 * own number is answered". Who they are is shown, never obeyed (identity never widens access).
 */
function knownSenderText(ev, p) {
  const channel = (ev && ev.channel) || "";
  const who = clip(p.person_name, 120) + (p.person_relation ? ` (your ${clip(p.person_relation, 60)})` : "");
  const verb = REFUSED_VERBS[channel] || "wrote";
  const why = p.reason === "not_owner"
    ? NOT_ANSWERED[channel] || "only you are answered"
    : REFUSED_REASONS[p.reason] || clip(p.reason || "refused", 60);
  return `${who} ${verb}; not answered: ${why}`;
}

/**
 * The notice for an `inbound.refused` event: {text, subject, preview, title}.
 * "Refused an SMS from +15550100 (not the owner)".
 */
export function refusedText(ev) {
  const p = (ev && ev.payload) || {};
  const what = ev && ev.channel === "sms" ? "an SMS" : ev && ev.channel === "email" ? "an email" : "a message";
  const sender = clip(p.sender || "an unknown sender", 120);
  const why = REFUSED_REASONS[p.reason] || clip(p.reason || "refused", 60);
  const text = p.person_name ? knownSenderText(ev, p) : `Refused ${what} from ${sender} (${why})`;
  const subject = p.subject ? clip(p.subject, 140) : "";
  const preview = p.preview ? clip(p.preview, 160) : "";
  const title = [text, p.person_name ? `From ${sender}` : "", subject ? `Subject: ${subject}` : "", p.detail ? clip(p.detail, 300) : "", "Not answered and not shown to Delegate."]
    .filter(Boolean)
    .join("\n");
  return { text, subject, preview, title };
}

/**
 * The channel lines of a message: {from, subject}. The sender only on inbound sms/email
 * (the owner's own number or address otherwise says nothing); the subject on email.
 */
export function messageHeader(ev) {
  const meta = (ev && ev.payload && ev.payload.meta) || {};
  const mail = ev && ev.channel === "email";
  const inbound = ev && ev.role === "user" && (ev.channel === "sms" || mail);
  return {
    from: inbound && str(meta.from, 998) ? clip(meta.from, 200) : "",
    subject: mail && str(meta.subject, 998) ? clip(meta.subject, 300) : "",
  };
}
