// A message on the timeline: its bubble, marks, answer attempts and actions, its channel parts
// (sender, subject, attachments, delivery), and an answer still being written (streamed).

import { attachmentText, mergeDelivery, messageAttachments, messageHeader } from "./channels.js";
import { h, icon, setText } from "./dom.js";
import { channelInfo, formatTime, fullTime } from "./format.js";
import { renderIncremental, renderMarkdown } from "./markdown.js";
import { attachedTo } from "./timeline-view.js";

export function timeEl(ts) {
  return h("time", { datetime: ts, title: fullTime(ts), text: formatTime(ts) });
}

export function channelBadge(channel) {
  const info = channelInfo(channel);
  return h("span", { class: `channel channel-${info.icon}`, title: `Channel: ${info.label}` }, icon(info.icon), info.label);
}

export function bubble(text) {
  const body = h("div", { class: "bubble md" });
  body.appendChild(renderMarkdown(document, text));
  return body;
}

function actionButton(name, label, iconName, onclick) {
  return h(
    "button",
    { type: "button", class: `msg-action act-${name}`, "aria-label": label, title: label, onclick },
    icon(iconName, "icon"),
    h("span", { class: "msg-action-label", text: label.split(" ")[0] }),
  );
}

function messageText(ev) {
  return (ev && ev.payload && typeof ev.payload.text === "string" && ev.payload.text) || "";
}

export function messageNode(item, cb) {
  const ev = item.event;
  const user = ev.role === "user";
  const who = user ? "You" : "Delegate";
  const info = channelInfo(ev.channel);
  const badge = channelBadge(ev.channel);
  const marks = h("span", { class: "msg-marks" });
  const pager = h("span", { class: "attempts", role: "group", "aria-label": "Answer attempts" });
  const body = h("div", { class: "bubble md" });
  const actions = h("div", { class: "msg-actions" });
  const from = h("span", { class: "msg-from", hidden: true });
  const subject = h("div", { class: "msg-subject", hidden: true });
  const files = h("ul", { class: "attachments", "aria-label": "Attachments", hidden: true });
  const delivery = h("div", { class: "delivery", hidden: true });
  const node = h(
    "article",
    {
      class: `msg ${user ? "msg-user" : "msg-assistant"}`,
      "data-event-id": ev.id,
      "data-kind": "message",
      "data-role": ev.role || "",
      "data-channel": ev.channel || "",
      "data-seq": ev.seq ?? "",
      "aria-label": `${who}, ${info.label}, ${formatTime(ev.ts)}`,
    },
    h("div", { class: "msg-meta" }, h("span", { class: "who", text: who }), badge, from, timeEl(ev.ts), marks, pager, actions),
    subject,
    body,
    files,
    delivery,
  );
  const copy = actionButton("copy", "Copy message", "copy", () => cb.onCopy(messageText(node._shown), copy));
  const regen = actionButton("regenerate", "Regenerate answer", "regenerate", () => cb.onRegenerate(node._shown));
  const edit = actionButton("edit", "Edit and resend", "edit", () => cb.onEdit(node._shown));
  actions.append(copy, user ? edit : regen);
  Object.assign(node, {
    _badge: badge, _marks: marks, _pager: pager, _body: body, _regen: regen, _edit: edit, _view: null, _cb: cb,
    _from: from, _subject: subject, _files: files, _delivery: delivery,
  });
  updateMessage(node, item);
  return node;
}

export function updateMessage(node, item) {
  const attempts = item.attempts || [item.event];
  // A new attempt shows itself; otherwise the person's choice stays.
  if (node._count !== attempts.length) {
    node._count = attempts.length;
    node._view = attempts.length - 1;
  }
  const shown = attempts[Math.min(node._view, attempts.length - 1)];
  node._badge.hidden = item.showChannel === false;
  node.classList.toggle("superseded", !!item.superseded);
  node._regen.hidden = !item.canRegenerate;
  node._edit.hidden = !item.canEdit;
  if (node._shown !== shown) {
    node._shown = shown;
    node.setAttribute("data-event-id", shown.id);
    node.setAttribute("data-seq", shown.seq ?? "");
    node.setAttribute("data-attempt", String((shown.payload && shown.payload.attempt) || 1));
    node._body.replaceChildren(renderMarkdown(document, messageText(shown)));
  }
  updateChannelParts(node, shown, attachedTo(item, shown.id));
  const p = shown.payload || {};
  const marks = [];
  if (p.stopped) marks.push(h("span", { class: "mark mark-stopped", title: "You stopped this answer; the part written so far is kept", text: "Stopped" }));
  if (item.superseded) {
    marks.push(h("span", { class: "mark mark-superseded", title: "Replaced by an edited message below; kept in history", text: item.event.role === "user" ? "Edited below" : "For an edited message" }));
  }
  // A spoken answer the caller talked over (barge-in) is kept as far as it was said.
  if (p.meta && p.meta.interrupted) marks.push(h("span", { class: "mark mark-interrupted", title: "Cut off when you started talking; the words so far are kept", text: "Interrupted" }));
  if (p.supersedes) marks.push(h("span", { class: "mark mark-edited", title: "An edited version of an earlier message", text: "Edited" }));
  const sig = marks.map((m) => m.textContent).join("|");
  if (node._marksSig !== sig) {
    node._marksSig = sig;
    node._marks.replaceChildren(...marks);
  }
  const pagerSig = `${node._view}/${attempts.length}`;
  if (node._pagerSig !== pagerSig) {
    node._pagerSig = pagerSig;
    node._pager.replaceChildren();
    node._pager.hidden = attempts.length < 2;
    if (attempts.length > 1) {
      const go = (d) => {
        node._view = Math.max(0, Math.min(attempts.length - 1, node._view + d));
        node._item = { ...node._item };
        updateMessage(node, node._item);
      };
      node._pager.append(
        h("button", { type: "button", class: "pager-btn", "aria-label": "Previous attempt", title: "Previous attempt", disabled: node._view === 0, onclick: () => go(-1), text: "‹" }),
        h("span", { class: "pager-text", text: `${node._view + 1} of ${attempts.length}` }),
        h("button", { type: "button", class: "pager-btn", "aria-label": "Next attempt", title: "Next attempt", disabled: node._view === attempts.length - 1, onclick: () => go(1), text: "›" }),
      );
    }
  }
  node._item = item;
}

/** The delivery line: "✓✓ delivered", "⚠ failed: <error>"; words and symbols, never colour alone. */
export function deliveryNode(d) {
  return h(
    "span",
    { class: `delivery-status tone-${d.tone}`, "data-status": d.status, "aria-label": d.label, title: d.title },
    h("span", { class: "delivery-symbol", "aria-hidden": "true", text: d.symbol }),
    " ",
    h("span", { class: "delivery-text", text: d.words }),
  );
}

/** One row per attachment: name, then type and size, then "not stored: why" when it was not kept. */
export function attachmentItems(list) {
  return list.map((f) => {
    const t = attachmentText(f);
    return h(
      "li",
      { class: `attachment${f.stored === false ? " not-stored" : ""}`, "aria-label": t.label, title: t.label },
      icon("clip", "icon attachment-icon"),
      h("span", { class: "attachment-name", text: t.name }),
      t.details ? h("span", { class: "attachment-details", text: t.details }) : null,
      t.status ? h("span", { class: "attachment-status", text: t.status }) : null,
    );
  });
}

/** Sender, subject, attachments and delivery: rebuilt only when what they say changes. */
function updateChannelParts(node, ev, attached) {
  const head = messageHeader(ev);
  setText(node._from, head.from ? `from ${head.from}` : "");
  node._from.hidden = !head.from;
  if (head.from) node._from.setAttribute("title", `Sent from ${head.from}`);
  node._subject.hidden = !head.subject;
  const subjectSig = head.subject;
  if (node._subjectSig !== subjectSig) {
    node._subjectSig = subjectSig;
    node._subject.replaceChildren();
    if (head.subject) node._subject.append(h("span", { class: "msg-subject-label", text: "Subject: " }), h("span", { class: "msg-subject-text", text: head.subject }));
  }
  const files = messageAttachments(ev, attached.files);
  const filesSig = JSON.stringify(files);
  if (node._filesSig !== filesSig) {
    node._filesSig = filesSig;
    node._files.replaceChildren(...attachmentItems(files));
    node._files.hidden = files.length === 0;
  }
  updateDelivery(node, attached.deliveries);
}

/** The merged delivery status into `node._delivery`, touching the DOM only when it changed. */
export function updateDelivery(node, deliveries) {
  const d = mergeDelivery(deliveries);
  const deliverySig = d ? `${d.status}|${d.text}|${d.title}` : "";
  if (node._deliverySig === deliverySig) return;
  node._deliverySig = deliverySig;
  node._delivery.replaceChildren(...(d ? [deliveryNode(d)] : []));
  node._delivery.hidden = !d;
  if (d) node.setAttribute("data-delivery", d.status);
  else node.removeAttribute("data-delivery");
  node.classList.toggle("delivery-bad", !!d && d.tone === "bad");
}

export function streamNode(item) {
  const node = h(
    "article",
    { class: "msg msg-assistant streaming", "data-turn-id": item.stream.turn_id, "aria-busy": "true", "aria-label": "Delegate is answering" },
    h("div", { class: "msg-meta" }, h("span", { class: "who", text: "Delegate" }), h("span", { class: "typing", text: "writing…" })),
    bubble(""),
  );
  updateStream(node, item);
  return node;
}

export function updateStream(node, item) {
  const s = item.stream;
  if (node._text === s.text && node._attempt === s.attempt) return;
  node._text = s.text;
  if (node._attempt !== s.attempt) node._md = null; // a retried stream starts over
  node._attempt = s.attempt;
  node.setAttribute("data-attempt", String(s.attempt));
  const body = node.querySelector(".bubble");
  for (const c of body.querySelectorAll(":scope .caret")) c.remove();
  // Only the last block is re-parsed and rebuilt on each delta.
  node._md = renderIncremental(document, body, node._md, s.text);
  node._reparsed = (node._reparsed || 0) + node._md.reparsed;
  node.setAttribute("data-reparsed", String(node._reparsed));
  // The caret follows the last word, inside the last paragraph or list item.
  let tail = body.lastElementChild;
  if (tail && (tail.tagName === "UL" || tail.tagName === "OL")) tail = tail.lastElementChild;
  const home = tail && (tail.tagName === "P" || tail.tagName === "LI") ? tail : body;
  home.appendChild(h("span", { class: "caret", "aria-hidden": "true" }));
}
