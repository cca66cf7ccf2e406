"""Varlink over tokend's Unix socket: NUL-terminated JSON messages, one
connection per client shared by its calls (a lock keeps them in turn), and a
connection of its own for each event stream.

A call that does not end with its reply (it timed out, was cancelled, or the
connection broke) discards the connection: its reply may still come, and would
be read as the next call's. A call is sent again, once, on a new connection
only when the old one was found closed before tokend could have read it; the
login calls are never sent again."""
import asyncio
import json
import os
import select
import socket
import threading
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Tuple, cast

from .errors import TokendError, Unreachable, error_for
from .values import AddedSession, Cookie, CookieSet, Event, SessionStatus, Token

INTERFACE = "io.tokend.Broker"
SYSTEM_SOCKET = "/run/tokend/io.tokend.Broker"
# Calls that start or finish a login: sent twice, a second login would begin or a code be redeemed twice.
NEVER_RESENT = frozenset({"Login", "BeginLogin", "FinishLogin"})


class _Closed(Unreachable):
    """The connection was found closed before tokend could have read the request:
    the send failed (EPIPE, ECONNRESET), or a connection reused after idling
    ended before any byte of the reply."""


def default_socket(explicit: Optional[str] = None) -> str:
    """As tokenctl finds it: `explicit`, else $TOKEND_SOCKET, else the system socket."""
    return explicit or os.environ.get("TOKEND_SOCKET") or SYSTEM_SOCKET


def _message(method: str, parameters: Dict[str, Any], more: bool = False) -> bytes:
    call: Dict[str, Any] = {"method": f"{INTERFACE}.{method}",
                            "parameters": {k: v for k, v in parameters.items() if v is not None}}
    if more:
        call["more"] = True
    return json.dumps(call, separators=(",", ":")).encode() + b"\0"


def _answer(frame: bytes) -> Dict[str, Any]:
    reply: Dict[str, Any] = json.loads(frame)
    if "error" in reply:
        raise error_for(reply["error"], reply.get("parameters"))
    return reply


def _cookie_set(parameters: Dict[str, Any]) -> CookieSet:
    return CookieSet([Cookie.from_wire(c) for c in parameters["cookies"]], parameters["header"], parameters["version"])


class _OwnKey:
    """Which events a stream yields: tokend sends every key's refreshed events to each subscriber,
    naming the key; the stream keeps those of the key its status reply names (neither resource nor
    scope: the session's own token), so that a generation is always compared with its own key's."""

    def __init__(self) -> None:
        self.key: Tuple[Optional[str], Optional[str]] = (None, None)

    def keeps(self, event: Event) -> bool:
        if event.event == "status":
            self.key = (event.resource, event.scope)
            return True
        return event.event != "refreshed" or (event.resource, event.scope) == self.key


class Tokend:
    """A client of tokend. Thread-safe: calls from many threads take turns on one connection."""

    def __init__(self, socket: Optional[str] = None, timeout: float = 60.0) -> None:
        self.socket = default_socket(socket)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._connection: Optional["_Connection"] = None

    def get_token(self, session: Optional[str] = None, min_valid: Optional[int] = None,
                  resource: Optional[str] = None, scope: Optional[str] = None) -> Token:
        """The session's token, or with `resource` (one of the session's `resources`) and `scope`
        (a subset of its scope, space-separated) the token of that key of the same grant."""
        reply = self.call("GetToken", session=session, minValidSeconds=min_valid, resource=resource, scope=scope)
        return Token.from_wire(reply["token"])

    def refresh(self, session: Optional[str] = None, stale_generation: Optional[int] = None,
                resource: Optional[str] = None, scope: Optional[str] = None) -> Token:
        """After a 401: name the generation that was refused (of the key named by `resource` and
        `scope`, as for get_token); tokend refreshes once for everyone."""
        reply = self.call("Refresh", session=session, staleGeneration=stale_generation, resource=resource, scope=scope)
        return Token.from_wire(reply["token"])

    def proof(self, method: str, url: str, session: Optional[str] = None, resource: Optional[str] = None,
              nonce: Optional[str] = None) -> Tuple[str, Token]:
        """A DPoP proof for one request (`nonce`: the server's DPoP-Nonce after it asked for one) and
        the current token it is bound to: send `Authorization: DPoP <token>` and `DPoP: <proof>`."""
        reply = self.call("GetProof", session=session, resource=resource, method=method, url=url, nonce=nonce)
        return reply["proof"], Token.from_wire(reply["token"])

    def cookies(self, url: str, session: Optional[str] = None) -> CookieSet:
        return _cookie_set(self.call("GetCookies", session=session, url=url))

    def status(self, session: Optional[str] = None) -> SessionStatus:
        return cast(SessionStatus, self.call("GetStatus", session=session)["status"])

    def add_session(self, name: str, resources: Optional[List[str]] = None, issuer: Optional[str] = None,
                    client_id: Optional[str] = None, scope: Optional[str] = None,
                    dpop: Optional[bool] = None) -> AddedSession:
        """A session of the caller's own (where [user-sessions] allows), full name USER/NAME; from
        `resources` alone tokend discovers the authorization server and registers a client. Log it in
        with `tokenctl login --session NAME --browser`."""
        return AddedSession.from_wire(self.call("AddSession", name=name, issuer=issuer, clientId=client_id,
                                                resources=resources, scope=scope, dpop=dpop))

    def remove_session(self, session: str, revoke: bool = True) -> bool:
        """Forgets a session a user added, its tokens revoked at the server first unless `revoke` is False;
        whether the server took the revocation."""
        return bool(self.call("RemoveSession", session=session, revoke=revoke).get("revoked"))

    def events(self, session: Optional[str] = None, since_version: Optional[int] = None,
               resource: Optional[str] = None, scope: Optional[str] = None) -> Iterator[Event]:
        """The session's events on a connection of their own ("status" first); ends when tokend stops.
        refreshed events are those of the key named by `resource` and `scope` (neither: the session's own)."""
        connection = _Connection(self.socket, timeout=None)
        own = _OwnKey()
        try:
            connection.send(_message("Subscribe", {"session": session, "sinceVersion": since_version,
                                                   "resource": resource, "scope": scope}, more=True))
            while True:
                reply = _answer(connection.frame())
                event = Event.from_wire(reply.get("parameters", {}))
                if own.keeps(event):
                    yield event
                if not reply.get("continues"):
                    return
        finally:
            connection.close()

    def call(self, method: str, /, **parameters: Any) -> Dict[str, Any]:
        """One call of io.tokend.Broker; its reply parameters, or the error raised."""
        message = _message(method, parameters)
        with self._lock:
            for attempt in (1, 2):
                if self._connection is not None and self._connection.closed_by_peer():
                    self._connection.close()
                    self._connection = None
                reused = self._connection is not None
                if self._connection is None:
                    self._connection = _Connection(self.socket, self.timeout)
                connection = self._connection
                try:
                    connection.send(message)
                    frame = connection.frame(reused)
                    break
                except BaseException as error:
                    connection.close()
                    self._connection = None
                    if attempt == 2 or not isinstance(error, _Closed) or method in NEVER_RESENT:
                        raise
        return _answer(frame).get("parameters", {})

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __enter__(self) -> "Tokend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Connection:
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.buffer = b""
        try:
            self.sock.connect(path)
        except OSError as error:
            self.sock.close()
            raise Unreachable("io.tokend.Unreachable", {"reason": f"{path}: {error.strerror or error}"}) from error

    def closed_by_peer(self) -> bool:
        """Whether tokend has closed this idle connection (idle-timeout): seen before a
        call is sent on it, so that even a login call need not be lost to it."""
        # poll(), not select(): select() cannot take descriptors from 1024 up.
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return bool(poller.poll(0)) and self.sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as error:
            raise _Closed("io.tokend.Unreachable", {"reason": f"{self.path}: {error}"}) from error
        except socket.timeout as error:
            raise _timed_out(self.path, self.sock.gettimeout()) from error
        except OSError as error:
            raise Unreachable("io.tokend.Unreachable", {"reason": f"{self.path}: {error}"}) from error

    def frame(self, reused: bool = False) -> bytes:
        """The next reply. `reused`: the connection idled since its last call, so
        an end before any byte means tokend closed it unread."""
        while b"\0" not in self.buffer:
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout as error:
                raise _timed_out(self.path, self.sock.gettimeout()) from error
            except OSError as error:
                closed = _Closed if reused and not self.buffer and isinstance(error, ConnectionResetError) else Unreachable
                raise closed("io.tokend.Unreachable", {"reason": f"{self.path}: {error}"}) from error
            if not chunk:
                closed = _Closed if reused and not self.buffer else Unreachable
                raise closed("io.tokend.Unreachable", {"reason": f"{self.path}: tokend closed the connection"})
            self.buffer += chunk
        frame, _, self.buffer = self.buffer.partition(b"\0")
        return frame

    def close(self) -> None:
        self.sock.close()


_Streams = Tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _timed_out(path: str, timeout: Optional[float]) -> Unreachable:
    return Unreachable("io.tokend.Unreachable", {"reason": f"{path}: no reply within {timeout or 0:g} s"})


class AsyncTokend:
    """The asyncio twin of Tokend: calls from many tasks take turns on one connection."""

    def __init__(self, socket: Optional[str] = None, timeout: float = 60.0) -> None:
        self.socket = default_socket(socket)
        self.timeout = timeout
        self._lock: Optional[asyncio.Lock] = None
        self._streams: Optional[_Streams] = None

    async def get_token(self, session: Optional[str] = None, min_valid: Optional[int] = None,
                        resource: Optional[str] = None, scope: Optional[str] = None) -> Token:
        reply = await self.call("GetToken", session=session, minValidSeconds=min_valid, resource=resource, scope=scope)
        return Token.from_wire(reply["token"])

    async def refresh(self, session: Optional[str] = None, stale_generation: Optional[int] = None,
                      resource: Optional[str] = None, scope: Optional[str] = None) -> Token:
        reply = await self.call("Refresh", session=session, staleGeneration=stale_generation, resource=resource,
                                scope=scope)
        return Token.from_wire(reply["token"])

    async def proof(self, method: str, url: str, session: Optional[str] = None, resource: Optional[str] = None,
                    nonce: Optional[str] = None) -> Tuple[str, Token]:
        reply = await self.call("GetProof", session=session, resource=resource, method=method, url=url, nonce=nonce)
        return reply["proof"], Token.from_wire(reply["token"])

    async def cookies(self, url: str, session: Optional[str] = None) -> CookieSet:
        return _cookie_set(await self.call("GetCookies", session=session, url=url))

    async def status(self, session: Optional[str] = None) -> SessionStatus:
        return cast(SessionStatus, (await self.call("GetStatus", session=session))["status"])

    async def add_session(self, name: str, resources: Optional[List[str]] = None, issuer: Optional[str] = None,
                          client_id: Optional[str] = None, scope: Optional[str] = None,
                          dpop: Optional[bool] = None) -> AddedSession:
        return AddedSession.from_wire(await self.call("AddSession", name=name, issuer=issuer, clientId=client_id,
                                                      resources=resources, scope=scope, dpop=dpop))

    async def remove_session(self, session: str, revoke: bool = True) -> bool:
        return bool((await self.call("RemoveSession", session=session, revoke=revoke)).get("revoked"))

    async def events(self, session: Optional[str] = None, since_version: Optional[int] = None,
                     resource: Optional[str] = None, scope: Optional[str] = None) -> AsyncIterator[Event]:
        reader, writer = await self._open()
        own = _OwnKey()
        try:
            writer.write(_message("Subscribe", {"session": session, "sinceVersion": since_version,
                                                "resource": resource, "scope": scope}, more=True))
            await writer.drain()
            while True:
                reply = _answer(await self._frame(reader))
                event = Event.from_wire(reply.get("parameters", {}))
                if own.keeps(event):
                    yield event
                if not reply.get("continues"):
                    return
        finally:
            writer.close()

    async def call(self, method: str, /, **parameters: Any) -> Dict[str, Any]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        message = _message(method, parameters)
        async with self._lock:
            for attempt in (1, 2):
                if self._streams is not None and self._streams[0].at_eof():  # closed by tokend while idle
                    self._streams[1].close()
                    self._streams = None
                reused = self._streams is not None
                if self._streams is None:
                    self._streams = await self._open()
                reader, writer = self._streams
                try:
                    await self._send(writer, message)
                    frame = await asyncio.wait_for(self._frame(reader, reused), self.timeout)
                    break
                except BaseException as error:  # a cancellation too: its reply would be the next call's
                    writer.close()
                    self._streams = None
                    if isinstance(error, asyncio.TimeoutError):
                        raise _timed_out(self.socket, self.timeout) from error
                    if attempt == 2 or not isinstance(error, _Closed) or method in NEVER_RESENT:
                        raise
        return _answer(frame).get("parameters", {})

    async def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None

    async def _open(self) -> _Streams:
        try:
            return await asyncio.open_unix_connection(self.socket, limit=16 << 20)
        except OSError as error:
            raise Unreachable("io.tokend.Unreachable", {"reason": f"{self.socket}: {error.strerror or error}"}) from error

    async def _send(self, writer: asyncio.StreamWriter, message: bytes) -> None:
        try:
            writer.write(message)
            await writer.drain()
        except (BrokenPipeError, ConnectionResetError) as error:
            raise _Closed("io.tokend.Unreachable", {"reason": f"{self.socket}: {error}"}) from error
        except OSError as error:
            raise Unreachable("io.tokend.Unreachable", {"reason": f"{self.socket}: {error}"}) from error

    async def _frame(self, reader: asyncio.StreamReader, reused: bool = False) -> bytes:
        """The next reply; `reused` as for the synchronous client's."""
        try:
            data = await reader.readuntil(b"\0")
        except asyncio.IncompleteReadError as error:
            closed = _Closed if reused and not error.partial else Unreachable
            raise closed("io.tokend.Unreachable", {"reason": f"{self.socket}: tokend closed the connection"}) from error
        except OSError as error:
            raise Unreachable("io.tokend.Unreachable", {"reason": f"{self.socket}: {error}"}) from error
        return data[:-1]


__all__ = ["Tokend", "AsyncTokend", "default_socket", "TokendError"]
