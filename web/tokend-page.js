// tokend-page.js: the page side of the tokend bridge, as promises.
//
//   const token = await tokend.getToken();                  // { accessToken, generation, expiresAt, ... }
//   // the API answered 401 with that token: ask for a newer one, never refresh yourself
//   const fresh = await tokend.refresh({ staleGeneration: token.generation });
//   // fresh is always newer than the generation named. When there is none, refresh rejects and the
//   // page does not try again with the refused token: error.name is
//   //   "io.tokend.Broker.UpstreamUnavailable"  wait error.parameters.retryAfter seconds
//   //   "io.tokend.Broker.LoginRequired"        the user logs in again ("loggedOut" follows)
//   tokend.on("refreshed", ({ generation }) => ...);        // also "loggedIn", "loggedOut"
//
// Wire format (usable without this file): the page posts
// { tokend: "request", id, method: "GetToken" | "Refresh", parameters } to its own origin and gets
// { tokend: "response", id, parameters } or { tokend: "response", id, error }, and events
// { tokend: "event", event, generation }.
"use strict";

(() => {
  let nextId = 1;
  const waiting = new Map();
  const listeners = new Map();

  window.addEventListener("message", (event) => {
    const message = event.data;
    if (event.source !== window || event.origin !== window.location.origin || !message?.tokend) return;
    if (message.tokend === "response" && waiting.has(message.id)) {
      const { resolve, reject, timer } = waiting.get(message.id);
      waiting.delete(message.id);
      clearTimeout(timer);
      if (message.error) reject(Object.assign(new Error(message.error), { name: message.error, parameters: message.parameters }));
      else resolve(message.parameters);
    } else if (message.tokend === "event") {
      for (const listener of listeners.get(message.event) ?? []) listener({ generation: message.generation });
    }
  });

  function request(method, parameters = {}, timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
      const id = nextId++;
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error("tokend: no answer (is the tokend extension installed, and is this origin one of the session's web-origins?)"));
      }, timeoutMs);
      waiting.set(id, { resolve, reject, timer });
      window.postMessage({ tokend: "request", id, method, parameters }, window.location.origin);
    });
  }

  window.tokend = {
    getToken: (options = {}) => request("GetToken", options).then((answer) => answer.token),
    refresh: (options = {}) => request("Refresh", options).then((answer) => answer.token),
    on(event, listener) {
      listeners.set(event, [...(listeners.get(event) ?? []), listener]);
    },
    request,
  };
})();
