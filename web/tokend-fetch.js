// tokend-fetch.js: fetch() with the session's token, and a DPoP proof when the token is DPoP-bound
// (RFC 9449). Load it after tokend-page.js.
//
//   const response = await tokend.fetch("https://api.example.com/me");
//   const mail = await tokend.fetch(url, { method: "POST", body, resource: "https://api.example.com/mail" });
//
// With a token whose tokenType is "DPoP" the request carries `Authorization: DPoP <token>` and a fresh
// `DPoP: <proof>` for its method and URL; otherwise `Authorization: Bearer <token>`. A 401 whose
// WWW-Authenticate says use_dpop_nonce is sent once more with a proof carrying the server's DPoP-Nonce;
// the last nonce of each origin goes into that origin's next proofs. Other answers, 401 included, come
// back as they are (after a 401 for a stale token: tokend.refresh, as tokend-page.js says). A cross-origin
// resource server must allow the Authorization and DPoP headers (CORS) and expose WWW-Authenticate and
// DPoP-Nonce.
"use strict";

(() => {
  const nonces = new Map(); // origin -> the last DPoP-Nonce it sent

  async function send(url, init, resource, nonce) {
    const method = (init.method ?? "GET").toUpperCase();
    const headers = new Headers(init.headers);
    let token;
    try {
      const answer = await tokend.getProof({ method, url: url.href, ...(nonce ? { nonce } : {}), ...(resource ? { resource } : {}) });
      token = answer.token;
      if (/^dpop$/i.test(token.tokenType ?? "")) headers.set("DPoP", answer.proof);
    } catch (error) {
      if (error.name !== "io.tokend.Broker.ProofNotAvailable") throw error;
      token = await tokend.getToken(resource ? { resource } : {}); // a session without DPoP
    }
    const scheme = headers.has("DPoP") ? "DPoP" : "Bearer";
    headers.set("Authorization", `${scheme} ${token.accessToken}`);
    const response = await fetch(url.href, { ...init, method, headers });
    const fresh = response.headers.get("DPoP-Nonce");
    if (fresh) nonces.set(url.origin, fresh);
    return { response, fresh, dpop: scheme === "DPoP" };
  }

  tokend.fetch = async (input, { resource, ...init } = {}) => {
    const url = new URL(String(input), window.location.href);
    const sent = nonces.get(url.origin);
    const { response, fresh, dpop } = await send(url, init, resource, sent);
    const asked = /use_dpop_nonce/.test(response.headers.get("WWW-Authenticate") ?? "");
    if (!dpop || response.status !== 401 || !asked || !fresh || fresh === sent) return response;
    return (await send(url, init, resource, fresh)).response; // once, and only with a new nonce
  };
})();
