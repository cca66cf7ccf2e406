"""The least of PostgreSQL's wire protocol a simulated tokend host needs, sent
as tokend (PostgresWire) sends it: a statement is Parse, Bind, Describe, Execute and
Sync written at once, one round trip and one transaction at the pooler (a
driver that waits for Parse's answer before it binds, as asyncpg does, holds
a pooled server connection across two round trips of a busy client). Text
parameters (the server infers their types, as for unnamed statements), text
results converted by type; md5 or SCRAM-SHA-256 login; no TLS."""
import asyncio
import base64
import hashlib
import hmac
import os
import struct
from typing import Any, Optional

INT_TYPES = {20, 21, 23, 26}  # int8, int2, int4, oid
FLOAT_TYPES = {700, 701, 1700}  # float4, float8, numeric


class PgError(Exception):
    def __init__(self, fields: dict[str, str]) -> None:
        self.code = fields.get("C", "")
        super().__init__(fields.get("M", "error"))


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cstring(text: str) -> bytes:
    return text.encode() + b"\0"


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, host: str, port: int, user: str, password: str, database: str,
                      application_name: str) -> "Connection":
        reader, writer = await asyncio.open_connection(host, port)
        connection = cls(reader, writer)
        try:
            await connection._start(user, password, database, application_name)
        except BaseException:
            writer.close()
            raise
        return connection

    async def _receive(self) -> tuple[bytes, bytes]:
        header = await self.reader.readexactly(5)
        return header[:1], await self.reader.readexactly(struct.unpack("!i", header[1:])[0] - 4)

    async def _start(self, user: str, password: str, database: str, application_name: str) -> None:
        parameters = b"".join(cstring(k) + cstring(v) for k, v in
                              (("user", user), ("database", database), ("application_name", application_name)))
        body = struct.pack("!i", 196608) + parameters + b"\0"
        self.writer.write(struct.pack("!i", len(body) + 4) + body)
        scram: Optional[Scram] = None
        while True:
            kind, body = await self._receive()
            if kind == b"E":
                raise PgError(fields(body))
            if kind == b"Z":
                return
            if kind != b"R":
                continue  # ParameterStatus, BackendKeyData, notices
            code = struct.unpack("!i", body[:4])[0]
            if code == 5:  # md5: md5(md5(password + user) + salt)
                inner = hashlib.md5((password + user).encode()).hexdigest()
                self.writer.write(message(b"p", cstring("md5" + hashlib.md5(inner.encode() + body[4:8]).hexdigest())))
            elif code == 3:
                self.writer.write(message(b"p", cstring(password)))
            elif code == 10:  # SASL: SCRAM-SHA-256 without channel binding
                scram = Scram(password)
                first = scram.first().encode()
                self.writer.write(message(b"p", cstring("SCRAM-SHA-256") + struct.pack("!i", len(first)) + first))
            elif code == 11:
                self.writer.write(message(b"p", scram.final(body[4:].decode()).encode()))
            elif code not in (0, 12):
                raise PgError({"M": f"authentication method {code} not supported here"})

    async def fetch(self, sql: str, *parameters: Any) -> list[tuple[Any, ...]]:
        """Rows (tuples) of one statement; PgError after the server is ready again if it failed."""
        values = b"".join(b"\xff\xff\xff\xff" if p is None else struct.pack("!i", len(v := text(p))) + v
                          for p in parameters)
        self.writer.write(
            message(b"P", b"\0" + cstring(sql) + b"\0\0")
            + message(b"D", b"S\0")
            + message(b"B", b"\0\0" + b"\0\0" + struct.pack("!h", len(parameters)) + values + b"\0\0")
            + message(b"E", b"\0" + b"\0\0\0\0")
            + message(b"S"))
        types: list[int] = []
        rows: list[tuple[Any, ...]] = []
        error: Optional[PgError] = None
        while True:
            kind, body = await self._receive()
            if kind == b"D":
                rows.append(row(body, types))
            elif kind == b"T":
                types = columns(body)
            elif kind == b"E":
                error = PgError(fields(body))
            elif kind == b"Z":
                if error is not None:
                    raise error
                return rows

    async def close(self) -> None:
        try:
            self.writer.write(message(b"X"))
            self.writer.close()
            await self.writer.wait_closed()
        except (OSError, ConnectionError):
            pass

    def terminate(self) -> None:
        self.writer.transport.abort()


def text(value: Any) -> bytes:
    if isinstance(value, bool):
        return b"t" if value else b"f"
    return str(value).encode()


def fields(body: bytes) -> dict[str, str]:
    return {chr(part[0]): part[1:].decode(errors="replace") for part in body.split(b"\0") if part}


def columns(body: bytes) -> list[int]:
    count, offset = struct.unpack("!h", body[:2])[0], 2
    types: list[int] = []
    for _ in range(count):
        offset = body.index(b"\0", offset) + 1
        types.append(struct.unpack("!i", body[offset + 6:offset + 10])[0])
        offset += 18
    return types


def row(body: bytes, types: list[int]) -> tuple[Any, ...]:
    count, offset = struct.unpack("!h", body[:2])[0], 2
    values: list[Any] = []
    for index in range(count):
        length = struct.unpack("!i", body[offset:offset + 4])[0]
        offset += 4
        if length < 0:
            values.append(None)
            continue
        raw = body[offset:offset + length].decode()
        offset += length
        kind = types[index] if index < len(types) else 25
        values.append(int(raw) if kind in INT_TYPES else float(raw) if kind in FLOAT_TYPES
                      else raw == "t" if kind == 16 else raw)
    return tuple(values)


class Scram:
    """RFC 5802 with SHA-256, as PgBouncer and PostgreSQL speak it (no channel binding: "n,,")."""

    def __init__(self, password: str) -> None:
        self.password = password.encode()
        self.nonce = base64.b64encode(os.urandom(18)).decode()
        self.bare = f"n=,r={self.nonce}"

    def first(self) -> str:
        return "n,," + self.bare

    def final(self, server_first: str) -> str:
        attributes = dict(part.split("=", 1) for part in server_first.split(","))
        salted = hashlib.pbkdf2_hmac("sha256", self.password, base64.b64decode(attributes["s"]), int(attributes["i"]))
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        without_proof = f"c=biws,r={attributes['r']}"
        signed = f"{self.bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(hashlib.sha256(client_key).digest(), signed, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}"
