"""An agent for the tests: FastMCP's Client over streamable HTTP, with no OAuth of
its own (tokend-proxy, or a header given here, adds the token), calling one tool.

    agent.py URL TOOL [--arguments JSON] [--header 'Name: value']... [--repeat N]
             [--until FILE] [--pause S] [--fresh] [--timeout S]

Writes one JSON object a line to stdout, flushed as it happens, so a test reads
what arrived and when, in order:

    {"progress": 1, "total": 5, "message": "step 1"}   a progress notification
    {"log": "step 1 of 5", "level": "info"}            a log notification
    {"result": ..., "call": 1}                         a call's answer (structured, else its text)
    {"error": "...", "type": "...", "call": 1}         a call that failed
    {"http": 401, "method": "POST", "www_authenticate": ..., "body": "..."}
                                                       an HTTP answer of 400 or more (the
                                                       client reports only "an error response")
    {"done": true, "calls": N, "errors": E}            the end; exit status 1 if any call failed

--repeat N makes N calls one after another; --until FILE calls until FILE exists
(--pause S between calls); --fresh opens a new MCP session for every call."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import httpx2
from fastmcp import Client
from fastmcp.client.logging import LogMessage
from fastmcp.client.transports import StreamableHttpTransport
from mcp.shared._httpx_utils import create_mcp_http_client


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields, default=str) + "\n")
    sys.stdout.flush()


async def on_progress(progress: float, total: float | None, message: str | None) -> None:
    say(progress=progress, total=total, message=message)


async def on_log(message: LogMessage) -> None:
    say(log=message.data, level=message.level)


async def on_response(response: httpx2.Response) -> None:
    if response.status_code >= 400:
        body = (await response.aread()).decode(errors="replace")[:2000]
        say(http=response.status_code, method=response.request.method,
            www_authenticate=response.headers.get("www-authenticate"), body=body)


def http_client(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None, **options: Any) -> httpx2.AsyncClient:
    """The MCP SDK's client (its timeouts), reporting error statuses."""
    client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
    client.event_hooks["response"].append(on_response)
    return client


def answer(result: Any) -> Any:
    if result.structured_content is not None:
        return result.data if result.data is not None else result.structured_content
    return "".join(getattr(block, "text", "") for block in result.content)


async def run(args: argparse.Namespace) -> int:
    headers = dict(h.split(":", 1) for h in args.header)
    headers = {k.strip(): v.strip() for k, v in headers.items()}
    arguments = json.loads(args.arguments)

    def client() -> Client:
        transport = StreamableHttpTransport(args.url, headers=headers or None, httpx_client_factory=http_client)
        return Client(transport, log_handler=on_log, timeout=args.timeout)

    calls = errors = 0
    session: Client | None = None
    try:
        while True:
            if args.until is None and calls >= args.repeat:
                break
            if args.until is not None and os.path.exists(args.until):
                break
            calls += 1
            try:
                if session is None or args.fresh:
                    if session is not None:
                        await session.__aexit__(None, None, None)
                    session = client()
                    await session.__aenter__()
                result = await session.call_tool(args.tool, arguments, progress_handler=on_progress)
                say(result=answer(result), call=calls)
            except Exception as error:  # noqa: BLE001 (every failure is reported, the agent goes on)
                errors += 1
                say(error=str(error) or repr(error), type=type(error).__name__, call=calls)
                if session is not None:
                    try:
                        await session.__aexit__(None, None, None)
                    except Exception:  # noqa: BLE001 (a broken session closes as it can)
                        pass
                    session = None
            if args.pause:
                await asyncio.sleep(args.pause)
    finally:
        if session is not None:
            await session.__aexit__(None, None, None)
    say(done=True, calls=calls, errors=errors)
    return 1 if errors else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("tool")
    parser.add_argument("--arguments", default="{}")
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--until")
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--timeout", type=float, default=120.0)
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
