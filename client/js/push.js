// The service worker and Web Push for this browser (issue #31).
//
// The worker (/sw.js, root scope) is registered on every start: it gives the installed app an
// offline "not connected" page and shows pushes. A push subscription is made only when the owner
// turns notifications on, is stored by the server per browser (its id kept here), is removed
// when they turn them off, and dies with sign-out (the server deletes it; this browser drops
// its side too).

import { api, HttpError } from "./api.js";
import { PREF_KEYS, readPref, writePref } from "./prefs.js";

export const workerSupported = () => "serviceWorker" in navigator && window.isSecureContext;
export const pushSupported = () => workerSupported() && "PushManager" in window && "Notification" in window;

/** Registers /sw.js; resolves to its registration, or null where there is none. */
export async function registerWorker() {
  if (!workerSupported()) return null;
  try {
    return await navigator.serviceWorker.register("/sw.js", { scope: "/" });
  } catch {
    return null; // a browser that refuses (private mode, policy) still runs the app
  }
}

function keyBytes(b64url) {
  const b64 = b64url.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((b64url.length + 3) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

/** The push subscription the server knows for this browser, or null. */
export function subscribedId() {
  return readPref(PREF_KEYS.pushSubscription);
}

function remember(id) {
  // Storage blocked: the server still has it; turning off finds it by the endpoint.
  writePref(PREF_KEYS.pushSubscription, id || null);
}

/** Subscribes this browser (permission must already be granted). Throws when the browser has
 * no push service (some headless or privacy-hardened browsers): the open tab still notifies. */
export async function enablePush() {
  if (!pushSupported()) throw new Error("this browser has no Web Push");
  const reg = await navigator.serviceWorker.ready;
  const { key } = await api.pushKey();
  let sub = await reg.pushManager.getSubscription();
  if (sub && sub.options && sub.options.applicationServerKey) {
    const current = new Uint8Array(sub.options.applicationServerKey);
    const wanted = keyBytes(key);
    if (current.length !== wanted.length || current.some((b, i) => b !== wanted[i])) {
      await sub.unsubscribe(); // made for another server key (the server's key was replaced)
      sub = null;
    }
  }
  if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) });
  const { id } = await api.subscribePush(sub.toJSON());
  remember(id);
  return id;
}

/** Turns push off for this browser: the server forgets it, and so does the browser. */
export async function disablePush() {
  const id = subscribedId();
  if (id) {
    try {
      await api.unsubscribePush(id);
    } catch (err) {
      if (!(err instanceof HttpError && err.status === 401)) throw err;
    }
  }
  await dropLocal();
}

/** After sign-out (the server already deleted this browser's subscription). */
export async function dropLocal() {
  remember(null);
  if (!pushSupported()) return;
  try {
    const reg = await navigator.serviceWorker.getRegistration();
    const sub = reg && (await reg.pushManager.getSubscription());
    if (sub) await sub.unsubscribe();
  } catch {
    /* nothing more to undo here */
  }
}
