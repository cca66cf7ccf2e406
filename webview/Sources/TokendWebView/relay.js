// tokend's relay inside a WebKitGTK web view. It runs in the pages of the
// session's web origins, in a script world of its own ("tokend") that the
// page's scripts cannot reach, and does what the browser extension's content
// script does: the page's requests (window.postMessage on its own origin) go
// to the app's native side through a message handler with reply, and the
// answers and session events come back as messages on the page's origin.
"use strict";

(() => {
  const origin = window.location.origin;
  const native = window.webkit.messageHandlers.tokend;

  window.addEventListener("message", (event) => {
    const message = event.data;
    if (event.source !== window || event.origin !== origin || message?.tokend !== "request") return;
    const { id, method, parameters } = message;
    native.postMessage({ method, parameters: parameters ?? {}, origin }).then(
      (answer) => window.postMessage({ tokend: "response", id, ...answer }, origin),
      () => window.postMessage({ tokend: "response", id, error: "io.tokend.Bridge.Disconnected" }, origin),
    );
  });

  // The native side calls this (in this world) to pass session events on.
  globalThis.tokendRelay = {
    event: (message) => window.postMessage({ tokend: "event", ...message }, origin),
  };

  window.postMessage({ tokend: "ready" }, origin);
})();
