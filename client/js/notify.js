// It tells you (issue #31): what Delegate did on its own shows as a toast, the tab title
// counts what arrived while the tab was in the background, and with the owner's permission a
// system notification appears while the tab is hidden.
//
// Permission is asked only when the owner does something that wants it: the Notifications
// control in the menu, or the offer shown the first time they set a reminder. Never at sign-in.
// With permission, this browser is also subscribed to Web Push (push.js), so a phone with the
// app closed hears about it too; a notification's tag is the event's id, so the open tab's
// notification and the push for the same event show once.

import { h } from "./dom.js";
import { PREF_KEYS, readPref, writePref } from "./prefs.js";
import { disablePush, dropLocal, enablePush, pushSupported, subscribedId } from "./push.js";

// A live event older than this is history arriving late (a reconnect's catch-up), not news.
const FRESH_MS = 10 * 60 * 1000;
const UNREAD = /^\(\d+\) /;
const clip = (text, n = 180) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

/** What the owner is told about `ev` ({title, body, tag}), or null: the same events the server
 * pushes (services/pollers push_notices.py). */
export function noticeFor(ev) {
  const p = ev.payload || {};
  let title;
  let body;
  if (ev.kind === "inner.signal" && p.signal_kind === "reminder.due") {
    title = "Reminder";
    body = (p.signal && p.signal.payload && p.signal.payload.text) || "A reminder is due.";
  } else if (ev.kind === "activation.outcome" && p.status === "completed") {
    title = "Delegate acted on its own";
    body = p.summary || "Open Delegate to see what it did.";
  } else if (ev.kind === "task.finished") {
    title = "Task finished";
    body = (p.data && p.data.answer) || "The task is done.";
  } else if (ev.kind === "task.failed") {
    title = "Task failed";
    body = `The task failed: ${(p.data && (p.data.reason || p.data.error)) || "it stopped"}`;
  } else if (ev.kind === "delivery" && (p.status === "failed" || p.status === "undelivered")) {
    title = p.channel === "sms" ? "An SMS was not delivered" : "An email was not delivered";
    body = p.error || p.status;
  } else {
    return null;
  }
  return { title, body: clip(String(body).replace(/\s+/g, " ").trim()), tag: ev.id };
}

const permission = () => ("Notification" in window ? Notification.permission : "unsupported");

export class Notifier {
  /** `toast(text, tone)` shows an in-page toast; `button` is the menu's Notifications control. */
  constructor({ toast, button }) {
    this.toast = toast;
    this.button = button;
    this.unread = 0;
    const seen = () => {
      if (!document.hidden) this.markRead();
    };
    document.addEventListener("visibilitychange", seen);
    window.addEventListener("focus", seen);
    if (button) button.addEventListener("click", () => this.toggle());
    this.updateButton();
  }

  /** Every committed event that arrived live. */
  eventArrived(ev) {
    if (ev.kind === "reminder.set" && ev.role !== "assistant") this.offer();
    const notice = noticeFor(ev);
    if (!notice || Date.now() - Date.parse(ev.ts) > FRESH_MS) return;
    this.toast(`${notice.title}: ${notice.body}`);
    if (!document.hidden) return;
    this.unread += 1;
    this.showTitle();
    this.showSystem(notice);
  }

  showTitle() {
    const base = document.title.replace(UNREAD, "");
    document.title = this.unread ? `(${this.unread}) ${base}` : base;
  }

  markRead() {
    if (!this.unread) return;
    this.unread = 0;
    this.showTitle();
  }

  /** A system notification, through the service worker where there is one (so it behaves like
   * a push: same tag, same click), else the page's own Notification. */
  async showSystem(notice) {
    if (permission() !== "granted") return;
    const options = { body: notice.body, tag: notice.tag, icon: "/icons/icon-192.png" };
    try {
      const reg = "serviceWorker" in navigator ? await navigator.serviceWorker.getRegistration() : null;
      if (reg && reg.active) {
        await reg.showNotification(notice.title, { ...options, data: { event_id: notice.tag } });
        return;
      }
      const note = new Notification(notice.title, options);
      note.onclick = () => window.focus();
    } catch {
      /* the browser refused (e.g. it turned notifications off itself): the toast and title stay */
    }
  }

  /** The first time the owner sets a reminder, offer notifications once (not a prompt: the
   * browser's own question comes only after they choose to). */
  offer() {
    if (permission() !== "default") return;
    if (readPref(PREF_KEYS.notifyOffered)) return;
    writePref(PREF_KEYS.notifyOffered, "1"); // storage blocked: offered anyway, once per page
    if (document.getElementById("notify-offer")) return;
    const yes = h("button", { type: "button", class: "primary", text: "Notify me" });
    const no = h("button", { type: "button", class: "ghost", text: "Not now" });
    const box = h("div", { id: "notify-offer", class: "toast toast-offer", role: "group", "aria-label": "Notifications" }, [
      h("span", { text: "Want a notification when a reminder fires, even with this tab in the background?" }),
      yes,
      no,
    ]);
    yes.addEventListener("click", async () => {
      box.remove();
      await this.turnOn();
    });
    no.addEventListener("click", () => box.remove());
    (document.getElementById("toasts") || document.body).appendChild(box);
    yes.focus({ preventScroll: true });
  }

  async toggle() {
    if (permission() === "granted" && (subscribedId() || !pushSupported())) {
      await this.turnOff();
    } else {
      await this.turnOn();
    }
  }

  async turnOn() {
    if (permission() === "unsupported") {
      this.toast("This browser cannot show notifications.", "warn");
      return;
    }
    const answer = permission() === "default" ? await Notification.requestPermission() : permission();
    if (answer !== "granted") {
      this.toast("Notifications are blocked for this site: allow them in the browser's site settings.", "warn");
      this.updateButton();
      return;
    }
    try {
      await enablePush();
      this.toast("Notifications on: this browser is told even when Delegate is closed.");
    } catch {
      this.toast("Notifications on while Delegate is open (this browser offers no background push).");
    }
    this.updateButton();
  }

  async turnOff() {
    try {
      await disablePush();
      this.toast("Background notifications off for this browser.");
    } catch {
      this.toast("Could not turn notifications off: Delegate is not answering. Try again.", "warn");
    }
    this.updateButton();
  }

  /** The session ended (signed out here or elsewhere, or expired): the server deleted this
   * browser's subscription with it, so the browser drops its side too. */
  signedOut() {
    this.unread = 0;
    if (subscribedId()) dropLocal().then(() => this.updateButton());
  }

  updateButton() {
    if (!this.button) return;
    const on = permission() === "granted" && (Boolean(subscribedId()) || !pushSupported());
    this.button.setAttribute("aria-pressed", String(on));
    const label = this.button.querySelector(".btn-label");
    if (label) label.textContent = on ? "Notifications on" : "Notify me";
    this.button.title = on
      ? "Notifications are on for this browser: click to turn background notifications off"
      : "Get a notification when a reminder fires or Delegate acts on its own";
  }
}
