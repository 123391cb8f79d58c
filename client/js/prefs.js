// The page's only use of localStorage: small, non-secret flags of this browser, under the keys
// named here and no other. The owner token never goes to storage (tests/client_js/static.test.mjs
// holds every other module to that, and this one to these keys).

export const PREF_KEYS = Object.freeze({
  notifyOffered: "delegate.notify.offered",
  pushSubscription: "delegate.push.subscription",
});

/** The stored value, or null (also when the browser blocks storage). */
export function readPref(key) {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}

/** Stores the value (null removes it); false when the browser blocks storage. */
export function writePref(key, value) {
  try {
    if (value === null) localStorage.removeItem(key);
    else localStorage.setItem(key, value);
    return true;
  } catch {
    return false;
  }
}
