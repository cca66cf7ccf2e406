// Runs in pages of the hosts of tokend's web origins: passes the page's
// requests (window.postMessage on its own origin) to the service worker, and
// the answers and session events back. The worker checks the exact origin.
"use strict";

(() => {
  const api = globalThis.browser ?? globalThis.chrome;
  const origin = window.location.origin;

  window.addEventListener("message", (event) => {
    const message = event.data;
    if (event.source !== window || event.origin !== origin || message?.tokend !== "request") return;
    const { id, method, parameters } = message;
    api.runtime.sendMessage({ tokend: "request", method, parameters }).then(
      (answer) => window.postMessage({ tokend: "response", id, ...answer }, origin),
      () => window.postMessage({ tokend: "response", id, error: "io.tokend.Bridge.Disconnected" }, origin),
    );
  });

  api.runtime.onMessage.addListener((message) => {
    if (message?.tokend !== "event") return;
    const { event, generation, resource, scope } = message;
    // resource and scope: a refreshed event of another key of the session (neither: its own token).
    const key = resource != null || scope != null ? { resource, scope } : {};
    window.postMessage({ tokend: "event", event, generation, ...key }, origin);
  });

  window.postMessage({ tokend: "ready" }, origin);
})();
