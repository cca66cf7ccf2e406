// The tokend bridge's service worker: one native port to tokend-native-host,
// a Subscribe per session that has web origins, pages' requests relayed with
// their origin, and the session's cookies kept in step in both directions.
// Tokens for other keys of a session (a resource, a narrower scope) have
// generations of their own: each key's is tracked apart from the session's.
"use strict";

const api = globalThis.browser ?? globalThis.chrome;
const HOST = "io.tokend.bridge";
const SAME_SITE_TO_BROWSER = { Strict: "strict", Lax: "lax", None: "no_restriction" };
const SAME_SITE_FROM_BROWSER = { strict: "Strict", lax: "Lax", no_restriction: "None" };

let port = null;
let nextId = 1;
let reconnectDelay = 250;
const pending = new Map(); // id -> { resolve, reject } or { stream: onReply, parts }
const sessions = new Map(); // name -> { origins, hosts, resources, applied, keys, waiters, chain }
const echoes = new Map(); // cookie keys this worker set or removed itself -> expiry time

// --- The native port -------------------------------------------------------

function connect() {
  port = api.runtime.connectNative(HOST);
  port.onMessage.addListener(onHostMessage);
  port.onDisconnect.addListener(() => {
    port = null;
    for (const [, waiter] of pending) waiter.reject?.(new Error("io.tokend.Bridge.Disconnected"));
    pending.clear();
    setTimeout(connect, reconnectDelay);
    reconnectDelay = Math.min(reconnectDelay * 2, 10000);
  });
  start().catch(() => setTimeout(() => port?.disconnect(), 1000));
}

function send(message) {
  if (!port) throw new Error("io.tokend.Bridge.Disconnected");
  port.postMessage(message);
}

function onHostMessage(message) {
  const waiter = pending.get(message.id);
  if (!waiter) return;
  if (waiter.stream) {
    // Large snapshots arrive in parts: gather their changes until the last.
    if (message.partial) {
      waiter.parts.push(...(message.parameters.changes ?? []));
      return;
    }
    if (waiter.parts.length) {
      message.parameters.changes = [...waiter.parts, ...(message.parameters.changes ?? [])];
      waiter.parts = [];
    }
    if (message.error || message.continues === false) pending.delete(message.id);
    waiter.stream(message);
    return;
  }
  pending.delete(message.id);
  waiter.resolve(message);
}

/// One call; resolves with { parameters } or { error, parameters }.
function call(method, parameters, origin) {
  return new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    try {
      send({ id, method, parameters, origin });
    } catch (error) {
      pending.delete(id);
      reject(error);
    }
  });
}

// --- Sessions --------------------------------------------------------------

async function start() {
  const reply = await call("ListSessions", {});
  if (reply.error) throw new Error(reply.error);
  reconnectDelay = 250;
  const origins = [];
  for (const status of reply.parameters.sessions) {
    if (!status.webOrigins?.length) continue;
    const hosts = new Set(status.webOrigins.map((origin) => new URL(origin).hostname));
    const session = sessions.get(status.session) ?? { applied: 0, keys: new Map(), waiters: [], chain: Promise.resolve() };
    Object.assign(session, { name: status.session, origins: status.webOrigins, hosts, resources: status.webResources ?? [] });
    for (const token of status.tokens ?? []) appliedKey(session, keyOf(token), token.generation);
    sessions.set(status.session, session);
    origins.push(...status.webOrigins);
    await subscribe(session);
  }
  await registerContentScript(origins);
}

async function subscribe(session) {
  const key = `version:${session.name}`;
  const stored = (await api.storage.local.get(key))[key] ?? 0;
  const id = nextId++;
  pending.set(id, {
    parts: [],
    stream: (message) => {
      if (message.error || message.continues === false) {
        // tokend went away: catch up from the last applied version when it is back.
        setTimeout(() => port && subscribe(session).catch(() => {}), 1000);
        return;
      }
      session.chain = session.chain.then(() => apply(session, message.parameters)).catch(() => {});
    },
  });
  send({ id, method: "Subscribe", parameters: { session: session.name, sinceVersion: stored } });
}

/// Events are applied one at a time, in order: a refresh's cookies are in the
/// browser before its `refreshed` event is, and before any page gets its token.
async function apply(session, event) {
  switch (event.event) {
    case "status":
      session.applied = Math.max(session.applied, event.generation);
      break;
    case "cookies":
      if (event.snapshot) await replaceCookies(session, event.changes.map((change) => change.cookie));
      else for (const change of event.changes) await applyChange(session, change);
      await api.storage.local.set({ [`version:${session.name}`]: event.version });
      break;
    case "refreshed":
      if (event.resource != null || event.scope != null) {
        // Another key's token: its generation is its own. Pages hear of the keys they may ask for.
        appliedKey(session, keyOf(event), event.generation);
        if (event.resource == null || session.resources.includes(event.resource)) {
          broadcast(session, { event: event.event, generation: event.generation, resource: event.resource, scope: event.scope });
        }
        break;
      }
    // falls through: the session's own token
    case "loggedIn":
      session.applied = Math.max(session.applied, event.generation);
      broadcast(session, { event: event.event, generation: event.generation });
      break;
    case "loggedOut":
    case "loginRequired":
      await clearCookies(session);
      broadcast(session, { event: "loggedOut", generation: event.generation });
      break;
  }
  session.waiters = session.waiters.filter((waiter) => !waiter());
}

/// A (resource, scope) key as tokend names it: scope split, without repeats, sorted; "" is the session's own.
function keyOf({ resource, scope }) {
  const scopes = [...new Set((scope ?? "").split(" ").filter(Boolean))].sort().join(" ");
  return resource == null && !scopes ? "" : `${resource ?? ""}|${scopes}`;
}

function appliedKey(session, key, generation) {
  session.keys.set(key, Math.max(session.keys.get(key) ?? 0, generation));
}

function appliedGeneration(session, key) {
  return key === "" ? session.applied : session.keys.get(key) ?? 0;
}

/// Resolves once the session's events up to `generation` of `key` are applied (at most `ms`).
function appliedThrough(session, key, generation, ms = 3000) {
  if (appliedGeneration(session, key) >= generation) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    session.waiters.push(() => {
      if (appliedGeneration(session, key) < generation) return false;
      clearTimeout(timer);
      resolve();
      return true;
    });
  });
}

async function broadcast(session, message) {
  const tabs = await api.tabs.query({});
  for (const tab of tabs) {
    if (!tab.url || !session.origins.includes(new URL(tab.url).origin)) continue;
    api.tabs.sendMessage(tab.id, { tokend: "event", session: session.name, ...message }).catch(() => {});
  }
}

// --- Pages -----------------------------------------------------------------

async function registerContentScript(origins) {
  const matches = [...new Set(origins.map((origin) => `${new URL(origin).protocol}//${new URL(origin).hostname}/*`))];
  await api.scripting.unregisterContentScripts({ ids: ["tokend"] }).catch(() => {});
  if (matches.length === 0) return;
  await api.scripting.registerContentScripts([
    { id: "tokend", matches, js: ["content.js"], runAt: "document_start", allFrames: false },
  ]);
}

api.runtime.onMessage.addListener((message, sender, reply) => {
  if (message?.tokend !== "request") return false;
  const origin = sender.origin ?? new URL(sender.url).origin;
  answerPage(origin, message).then(reply, (error) => reply({ error: String(error.message ?? error) }));
  return true;
});

async function answerPage(origin, message) {
  const session = [...sessions.values()].find((candidate) => candidate.origins.includes(origin));
  if (!session || !["GetToken", "Refresh", "GetProof"].includes(message.method)) {
    return { error: "io.tokend.Broker.PermissionDenied" };
  }
  // resource and scope pass on: tokend-native-host refuses a resource outside the session's web-resources;
  // tokend holds the call, marked with the page, to them (a GetProof to URLs within them).
  const parameters = { ...(message.parameters ?? {}), session: session.name };
  const answer = await call(message.method, parameters, origin);
  if (answer.error) return { error: answer.error, parameters: answer.parameters };
  const generation = answer.parameters.token?.generation ?? 0;
  await appliedThrough(session, keyOf(parameters), generation);
  return { parameters: answer.parameters };
}

// --- Cookies: tokend -> browser --------------------------------------------

function cookieKey(name, domain, path) {
  return `${name}|${domain.replace(/^\./, "")}|${path}`;
}

/// A change this worker makes itself comes back through cookies.onChanged;
/// it is recognised by identity and value (or removal) and not sent to tokend.
function echoKey(key, value) {
  return `${key}|${value === null ? "(removed)" : value}`;
}

function expectEcho(key, value) {
  echoes.set(echoKey(key, value), Date.now() + 5000);
}

function isEcho(key, value) {
  const entry = echoKey(key, value);
  const until = echoes.get(entry);
  if (until === undefined) return false;
  echoes.delete(entry);
  return until >= Date.now();
}

function mirrored(session, cookie) {
  const domain = cookie.domain.replace(/^\./, "");
  return [...session.hosts].some((host) =>
    cookie.hostOnly ? host === domain : host === domain || host.endsWith(`.${domain}`));
}

function cookieURL(cookie) {
  return `${cookie.secure ? "https" : "http"}://${cookie.domain.replace(/^\./, "")}${cookie.path}`;
}

async function applyChange(session, change) {
  const cookie = change.cookie;
  if (!mirrored(session, cookie)) return;
  const key = cookieKey(cookie.name, cookie.domain, cookie.path);
  if (change.action === "delete") {
    expectEcho(key, null);
    await api.cookies.remove({ url: cookieURL(cookie), name: cookie.name });
    return;
  }
  const details = {
    url: cookieURL(cookie), name: cookie.name, value: cookie.value, path: cookie.path,
    secure: cookie.secure, httpOnly: cookie.httpOnly,
    sameSite: SAME_SITE_TO_BROWSER[cookie.sameSite] ?? "unspecified",
  };
  if (!cookie.hostOnly) details.domain = cookie.domain;
  if (cookie.expiresAt != null) details.expirationDate = cookie.expiresAt;
  const current = await api.cookies.get({ url: details.url, name: cookie.name });
  if (current && current.value === cookie.value && current.path === cookie.path) return; // already so
  expectEcho(key, cookie.value);
  await api.cookies.set(details);
}

async function browserCookies(session) {
  const all = [];
  for (const host of session.hosts) all.push(...(await api.cookies.getAll({ domain: host })));
  const seen = new Set();
  return all.filter((cookie) => {
    const key = cookieKey(cookie.name, cookie.domain, cookie.path);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

async function replaceCookies(session, cookies) {
  const wanted = new Set(cookies.map((cookie) => cookieKey(cookie.name, cookie.domain, cookie.path)));
  for (const cookie of await browserCookies(session)) {
    const key = cookieKey(cookie.name, cookie.domain, cookie.path);
    if (wanted.has(key)) continue;
    expectEcho(key, null);
    await api.cookies.remove({ url: cookieURL(cookie), name: cookie.name });
  }
  for (const cookie of cookies) await applyChange(session, { action: "set", cookie });
}

async function clearCookies(session) {
  for (const cookie of await browserCookies(session)) {
    expectEcho(cookieKey(cookie.name, cookie.domain, cookie.path), null);
    await api.cookies.remove({ url: cookieURL(cookie), name: cookie.name });
  }
}

// --- Cookies: browser -> tokend --------------------------------------------

api.cookies.onChanged.addListener(({ removed, cookie, cause }) => {
  if (removed && cause === "overwrite") return; // the new value follows as its own event
  if (isEcho(cookieKey(cookie.name, cookie.domain, cookie.path), removed ? null : cookie.value)) return;
  for (const session of sessions.values()) {
    if (!mirrored(session, cookie)) continue;
    const header = setCookieHeader(cookie, removed);
    call("ImportCookies", { session: session.name, url: cookieURL(cookie), setCookie: [header] }).catch(() => {});
  }
});

function setCookieHeader(cookie, removed) {
  const parts = [`${cookie.name}=${cookie.value}`, `Path=${cookie.path}`];
  if (!cookie.hostOnly) parts.push(`Domain=${cookie.domain.replace(/^\./, "")}`);
  if (cookie.secure) parts.push("Secure");
  if (cookie.httpOnly) parts.push("HttpOnly");
  if (SAME_SITE_FROM_BROWSER[cookie.sameSite]) parts.push(`SameSite=${SAME_SITE_FROM_BROWSER[cookie.sameSite]}`);
  if (removed) parts.push("Max-Age=0");
  else if (cookie.expirationDate) parts.push(`Expires=${new Date(cookie.expirationDate * 1000).toUTCString()}`);
  return parts.join("; ");
}

connect();
