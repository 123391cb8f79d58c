// Words for what the page shows: channel labels, numbers, durations, repeat rules and times.
// Pure functions; the DOM layer decides how they look. (How an inner-plane event reads:
// inner-words.js; a signal or a decision: signal-words.js.)

export const CHANNELS = {
  text: { label: "Text", icon: "text" },
  browser_voice: { label: "Browser voice", icon: "mic" },
  phone: { label: "Phone", icon: "phone" },
  sms: { label: "SMS", icon: "sms" },
  email: { label: "Email", icon: "mail" },
  inner: { label: "Inner", icon: "inner" },
};

export function channelInfo(channel) {
  return CHANNELS[channel] || { label: String(channel || "Unknown"), icon: "text" };
}

const numberFormat = new Intl.NumberFormat("en-US");

export function formatNumber(n) {
  return Number.isFinite(n) ? numberFormat.format(n) : "–";
}

export function formatPercent(p) {
  if (!Number.isFinite(p)) return "–";
  if (p > 0 && p < 1) return "<1%";
  return `${Math.round(p)}%`;
}

/** "1 item", "3 items". */
export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/** One line of at most n characters, with an ellipsis when cut. */
export function clip(text, n) {
  const one = String(text ?? "").replace(/\s+/g, " ").trim();
  return one.length > n ? `${one.slice(0, n - 1)}…` : one;
}

/** 42 → "42 s", 190 → "3 min", 7500 → "2 h 5 min", 180000 → "2 days 2 h". */
export function durationWords(seconds) {
  const s = Math.max(0, Math.round(Number(seconds) || 0));
  if (s < 60) return `${s} s`;
  // Rounded first, so 3,599 s reads "1 h", never "60 min".
  const minutes = Math.round(s / 60);
  if (minutes < 60) return `${minutes} min`;
  if (minutes < 24 * 60) return `${Math.floor(minutes / 60)} h${minutes % 60 ? ` ${minutes % 60} min` : ""}`;
  const hours = Math.round(s / 3600);
  const d = Math.floor(hours / 24);
  return `${d} day${d === 1 ? "" : "s"}${hours % 24 ? ` ${hours % 24} h` : ""}`;
}

const FREQ_WORDS = { SECONDLY: "second", MINUTELY: "minute", HOURLY: "hour", DAILY: "day", WEEKLY: "week", MONTHLY: "month", YEARLY: "year" };
const DAY_WORDS = { MO: "Mon", TU: "Tue", WE: "Wed", TH: "Thu", FR: "Fri", SA: "Sat", SU: "Sun" };

/** "FREQ=DAILY;BYHOUR=9;BYMINUTE=30" → "every day at 09:30"; an odd rule reads as itself. */
export function repeatWords(rrule) {
  const parts = {};
  for (const pair of String(rrule || "").replace(/^RRULE:/i, "").split(";")) {
    const [k, v] = pair.split("=");
    if (k && v) parts[k.trim().toUpperCase()] = v.trim().toUpperCase();
  }
  const unit = FREQ_WORDS[parts.FREQ];
  if (!unit) return String(rrule || "");
  const n = Number.parseInt(parts.INTERVAL || "1", 10);
  let text = n > 1 ? `every ${n} ${unit}s` : `every ${unit}`;
  if (parts.BYDAY) text += ` on ${parts.BYDAY.split(",").map((d) => DAY_WORDS[d.slice(-2)] || d).join(", ")}`;
  if (parts.BYHOUR && !parts.BYHOUR.includes(",")) {
    const minute = parts.BYMINUTE && !parts.BYMINUTE.includes(",") ? parts.BYMINUTE : "0";
    text += ` at ${parts.BYHOUR.padStart(2, "0")}:${minute.padStart(2, "0")}`;
  }
  if (parts.COUNT) text += `, ${parts.COUNT} times`;
  return text;
}

/** When a reminder spec fires, in words: a time, "every day at 09:00", or its cron line. */
export function reminderSchedule(spec) {
  if (!spec || typeof spec !== "object") return "";
  if (spec.at) return formatTime(spec.at);
  if (spec.rrule) return repeatWords(spec.rrule);
  if (spec.cron) return `cron ${spec.cron}`;
  return "";
}

function toDate(ts) {
  const d = ts instanceof Date ? ts : new Date(ts);
  return Number.isNaN(d.getTime()) ? null : d;
}

function sameDay(a, b) {
  return a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();
}

// One formatter each, made once: toLocale*String(…, options) builds a new Intl.DateTimeFormat
// on every call, and a timeline of 5,000 events asks for three times that many times (its
// first render spent most of its time there).
const TIME = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit" });
const WEEKDAY = new Intl.DateTimeFormat(undefined, { weekday: "short" });
const DAY_MONTH = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short" });
const DAY_MONTH_YEAR = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short", year: "numeric" });
const FULL = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", second: "numeric",
});

/** "14:05" today, "Tue 14:05" this week, "3 Mar 14:05" this year, else with the year. */
export function formatTime(ts, now = new Date()) {
  const d = toDate(ts);
  if (!d) return "";
  const time = TIME.format(d);
  if (sameDay(d, now)) return time;
  const days = (now - d) / 86400000;
  if (days >= 0 && days < 6) return `${WEEKDAY.format(d)} ${time}`;
  return `${(d.getFullYear() !== now.getFullYear() ? DAY_MONTH_YEAR : DAY_MONTH).format(d)} ${time}`;
}

/** A span's time range: "14:05–14:32", or both ends in full when they fall on different days. */
export function formatRange(start, end, now = new Date()) {
  const a = toDate(start);
  const b = toDate(end);
  if (!a) return "";
  if (!b || b - a < 60000) return formatTime(a, now);
  const tail = sameDay(a, b) ? TIME.format(b) : formatTime(b, now);
  return `${formatTime(a, now)}–${tail}`;
}

export function fullTime(ts) {
  const d = toDate(ts);
  return d ? FULL.format(d) : "";
}
