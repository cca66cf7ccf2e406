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
// One login, several APIs: a token for one of the session's web-resources (RFC 8707), or for a
// narrower scope, is a key of its own with its own generation:
//   const mail = await tokend.getToken({ resource: "https://mail.example.com/", scope: "mail.read" });
//   await tokend.refresh({ staleGeneration: mail.generation, resource: mail.resource, scope: "mail.read" });
//   tokend.on("refreshed", ({ generation }) => ..., { resource: "https://mail.example.com/" });
// A resource the session does not let pages have is refused before tokend is asked:
//   "org.varlink.service.PermissionDenied", error.parameters.reason says why.
// "refreshed" listeners hear the refreshes of the key they name (none: the session's own token).
//
// DPoP-bound tokens (RFC 9449): a token whose tokenType is "DPoP" goes with a proof for each request,
// made by tokend for that method and URL (and the resource server's nonce, when it sent one):
//   const { proof, token } = await tokend.getProof({ method: "GET", url: "https://api.example.com/me" });
//   fetch(url, { headers: { Authorization: `DPoP ${token.accessToken}`, DPoP: proof } });
// A page gets proofs only for URLs within the session's web-resources (same scheme, host and port, the
// path under the resource's); others are refused with "org.varlink.service.PermissionDenied" and a
// reason. tokend-fetch.js does the headers and the nonce retry.
//
// Wire format (usable without this file): the page posts
// { tokend: "request", id, method: "GetToken" | "Refresh" | "GetProof", parameters } to its own origin and gets
// { tokend: "response", id, parameters } or { tokend: "response", id, error, parameters }, and events
// { tokend: "event", event, generation } ({ ..., resource, scope } for another key's refreshed event).
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
      const key = keyOf(message);
      for (const { listener, wanted } of listeners.get(message.event) ?? []) {
        if (message.event === "refreshed" && wanted !== key) continue; // loggedIn, loggedOut: every key's
        listener(key ? { generation: message.generation, resource: message.resource, scope: message.scope }
          : { generation: message.generation });
      }
    }
  });

  // A (resource, scope) key as tokend names it: scope split, without repeats, sorted; "" is the session's own.
  function keyOf({ resource, scope } = {}) {
    const scopes = [...new Set((scope ?? "").split(" ").filter(Boolean))].sort().join(" ");
    return resource == null && !scopes ? "" : `${resource ?? ""}|${scopes}`;
  }

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
    // { method, url, nonce?, resource? } -> { proof, token }
    getProof: (options) => request("GetProof", options).then(({ proof, token }) => ({ proof, token })),
    on(event, listener, key = {}) {
      listeners.set(event, [...(listeners.get(event) ?? []), { listener, wanted: keyOf(key) }]);
    },
    request,
  };
})();
