// The Reminders panel: upcoming reminders with a Cancel button each, and the topbar count.
// It asks GET /api/reminders on sign-in, after every reconnect, and whenever a /chat event
// says reminders changed (set, changed, cancelled, scheduled, or one fired).

import { api, HttpError } from "./api.js";
import { reconcile, setText } from "./dom.js";
import { refreshesReminders, reminderRow, remindersFrom, upcomingReminders } from "./reminders.js";

const $ = (id) => document.getElementById(id);

const REFRESH_DEBOUNCE_MS = 150; // a burst of reminder events is one request
const TICK_MS = 30000; // "in 5 min" ages while the panel is open

export class RemindersPanel {
  /** @param {{onUnauthorized: () => void, toast: (text: string, tone?: string) => void}} hooks */
  constructor(hooks) {
    this.hooks = hooks;
    this.list = [];
    this.loaded = false;
    this.error = null; // why the list could not be read, in words
    this.rows = new Map();
    this.inFlight = null;
    this.again = false;
    this.timer = null;
    this.session = 0;
    $("reminders-btn").addEventListener("click", () => (this.isOpen ? this.close() : this.open()));
    $("reminders-close").addEventListener("click", () => this.close());
    setInterval(() => this.isOpen && this.render(), TICK_MS);
  }

  get isOpen() {
    return !$("reminders-panel").hidden;
  }

  open() {
    $("reminders-panel").hidden = false;
    $("reminders-btn").setAttribute("aria-expanded", "true");
    this.render();
    this.refresh();
  }

  close() {
    $("reminders-panel").hidden = true;
    $("reminders-btn").setAttribute("aria-expanded", "false");
  }

  /** Signed out: forget everything, and let a late answer of the old session change nothing. */
  clear() {
    this.session += 1;
    clearTimeout(this.timer);
    this.list = [];
    this.loaded = false;
    this.error = null;
    this.close();
    this.render();
  }

  /** A committed event from /chat: ask again when it is about reminders. */
  eventArrived(ev) {
    if (!refreshesReminders(ev)) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), REFRESH_DEBOUNCE_MS);
  }

  /** Read the list; a refresh asked for while one runs runs once more after it. */
  async refresh() {
    if (this.inFlight) {
      this.again = true;
      return this.inFlight;
    }
    const session = this.session;
    this.inFlight = (async () => {
      try {
        const body = await api.reminders();
        if (session !== this.session) return;
        this.list = upcomingReminders(remindersFrom(body));
        this.loaded = true;
        this.error = null;
      } catch (err) {
        if (session !== this.session) return;
        if (err instanceof HttpError && err.status === 401) {
          this.hooks.onUnauthorized();
          return;
        }
        this.error = err instanceof HttpError && err.status >= 500 ? "Reminders are unavailable right now: Delegate’s inner plane is not answering." : "Reminders could not be loaded.";
      } finally {
        this.inFlight = null;
      }
      this.render();
      if (this.again) {
        this.again = false;
        await this.refresh();
      }
    })();
    return this.inFlight;
  }

  async cancel(reminder, button) {
    button.disabled = true;
    setText(button, "Cancelling…");
    try {
      await api.cancelReminder(reminder.id);
      this.list = this.list.filter((r) => r.id !== reminder.id);
      this.render();
      this.hooks.toast("Reminder cancelled.");
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      // 404 / 409: it is gone already (fired, or cancelled elsewhere); the refresh below shows that.
      if (!(err instanceof HttpError && (err.status === 404 || err.status === 409))) {
        this.hooks.toast("Could not cancel the reminder. Try again.", "warn");
      }
      button.disabled = false;
      setText(button, "Cancel");
    }
    this.refresh(); // the truth is the inner plane's
  }

  render() {
    const count = this.list.length;
    const badge = $("reminders-count");
    setText(badge, String(count));
    badge.hidden = count === 0;
    $("reminders-btn").setAttribute("aria-label", count ? `Reminders: ${count} upcoming` : "Reminders");
    const status = $("reminders-status");
    const text = this.error || (!this.loaded ? "Loading…" : count ? "" : "No upcoming reminders. Ask Delegate to remind you of something.");
    setText(status, text);
    status.hidden = !text;
    status.dataset.tone = this.error ? "warn" : "";
    const now = new Date();
    // Keyed by id and revision: a changed reminder gets a new row; the clock text ages on every render.
    reconcile(
      $("reminders-list"),
      this.rows,
      this.list.map((r) => ({ key: `${r.id}:${r.revision ?? ""}:${r.next_due ?? ""}`, reminder: r })),
      (item) => reminderRow(item.reminder, { now, onCancel: (r, button) => this.cancel(r, button) }),
      (node, item) => {
        const when = node.querySelector(".reminder-when");
        const fresh = reminderRow(item.reminder, { now }).querySelector(".reminder-when");
        if (when && fresh && when.textContent !== fresh.textContent) setText(when, fresh.textContent);
      },
    );
  }
}
