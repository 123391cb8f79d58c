// Delegate's service worker (issue #31): the offline shell and Web Push.
//
// - It caches only the offline shell (a "not connected" page and its icon and stylesheet). It
//   never caches the API, the timeline, or any other answer: the owner's data stays on the
//   server, and the app itself always comes from the network (a stale app against a newer
//   server would be worse than none). A page navigation that cannot reach the server gets the
//   offline shell instead of the browser's error page.
// - A push (from the pollers, encrypted for this browser) becomes a notification; its tag is
//   the event's id, so the same event notified by the open page and by a push shows once.
// Served from the root (/sw.js), so its scope is the whole app.

const SHELL = "delegate-shell-v1";
const SHELL_FILES = ["/offline.html", "/offline.css", "/favicon.svg", "/icons/icon-192.png"];

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(SHELL).then((cache) => cache.addAll(SHELL_FILES)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) => Promise.all(names.filter((n) => n !== SHELL).map((n) => caches.delete(n))))
      .then(() => self.clients.claim()),
  );
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin || request.method !== "GET") return;
  if (request.mode === "navigate") {
    // Revalidated with the server every time: a page kept by the HTTP cache must not stand in
    // for a server that is gone (the app would start and fail in pieces).
    const fresh = new Request(request.url, { cache: "no-cache", credentials: "same-origin" });
    event.respondWith(fetch(fresh).catch(() => caches.match("/offline.html")));
    return;
  }
  // The shell's own files, only for the offline page (it is shown when nothing else answers).
  if (SHELL_FILES.includes(url.pathname) && !url.pathname.startsWith("/api/")) {
    event.respondWith(fetch(request).catch(() => caches.match(url.pathname)));
  }
  // Everything else, the API above all, goes to the network untouched and is never stored.
});

self.addEventListener("push", (event) => {
  let notice = {};
  try {
    notice = event.data ? event.data.json() : {};
  } catch {
    notice = { title: "Delegate", body: event.data ? event.data.text() : "" };
  }
  const title = notice.title || "Delegate";
  event.waitUntil(
    self.registration.showNotification(title, {
      body: notice.body || "",
      tag: notice.tag || undefined,
      icon: "/icons/icon-192.png",
      badge: "/icons/maskable-192.png",
      data: { event_id: notice.event_id || null, kind: notice.kind || null },
    }),
  );
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((list) => {
      const open = list.find((c) => new URL(c.url).origin === self.location.origin);
      return open ? open.focus() : self.clients.openWindow("/");
    }),
  );
});
