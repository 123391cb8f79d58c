// The Reminders panel: upcoming reminders with a Cancel button each, and the topbar count.
// It asks GET /api/reminders on sign-in, after every reconnect, and whenever a /chat event
// says reminders changed (set, changed, cancelled, scheduled, or one fired).

import { api, HttpError } from "./api.js";
import { reconcile, setText } from "./dom.js";
import { Panel, panelElements, showStatus } from "./panel.js";
import { refreshesReminders, reminderRow, remindersFrom, upcomingReminders } from "./reminders.js";

const $ = (id) => document.getElementById(id);

const REFRESH_DEBOUNCE_MS = 150; // a burst of reminder events is one request
const TICK_MS = 30000; // "in 5 min" ages while the panel is open

export class RemindersPanel extends Panel {
  /** @param {{onUnauthorized: () => void, toast: (text: string, tone?: string) => void}} hooks */
  constructor(hooks) {
    // Closed, events still refresh it: the topbar count follows them.
    super(hooks, panelElements("reminders"), { debounceMs: REFRESH_DEBOUNCE_MS, whileClosed: true });
    this.list = [];
    this.rows = new Map();
    setInterval(() => this.isOpen && this.render(), TICK_MS);
  }

  load() {
    return api.reminders();
  }

  apply(body) {
    this.list = upcomingReminders(remindersFrom(body));
  }

  relevant(ev) {
    return refreshesReminders(ev);
  }

  errorText(err) {
    return err instanceof HttpError && err.status >= 500 ? "Reminders are unavailable right now: Delegate’s inner plane is not answering." : "Reminders could not be loaded.";
  }

  reset() {
    this.list = [];
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
    showStatus($("reminders-status"), this.statusText(!count, "No upcoming reminders. Ask Delegate to remind you of something."), Boolean(this.error));
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
