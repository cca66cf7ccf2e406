"""`httpx` auth, for Client and AsyncClient: the session's token on every
request; on a 401 with it, one compare-and-refresh through tokend and one retry."""
from typing import AsyncGenerator, Generator, Optional

import httpx

from .client import AsyncTokend, Tokend
from .errors import LoginRequired, UpstreamUnavailable


class TokendAuth(httpx.Auth):
    # The body is kept so that the request can be sent again after a refresh.
    requires_request_body = True

    def __init__(self, tokend: Optional[Tokend] = None, async_tokend: Optional[AsyncTokend] = None,
                 session: Optional[str] = None, min_valid: Optional[int] = None) -> None:
        self._tokend = tokend
        self._async_tokend = async_tokend
        self.session = session
        self.min_valid = min_valid

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        tokend = self._tokend = self._tokend or Tokend()
        token = tokend.get_token(self.session, self.min_valid)
        request.headers["Authorization"] = token.authorization
        response = yield request
        if response.status_code == 401:
            # tokend has nothing newer than the refused token: the 401 stands.
            try:
                fresh = tokend.refresh(self.session, stale_generation=token.generation)
            except (UpstreamUnavailable, LoginRequired):
                return
            if fresh.access_token != token.access_token:
                request.headers["Authorization"] = fresh.authorization
                yield request

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        tokend = self._async_tokend = self._async_tokend or AsyncTokend()
        token = await tokend.get_token(self.session, self.min_valid)
        request.headers["Authorization"] = token.authorization
        response = yield request
        if response.status_code == 401:
            try:
                fresh = await tokend.refresh(self.session, stale_generation=token.generation)
            except (UpstreamUnavailable, LoginRequired):
                return
            if fresh.access_token != token.access_token:
                request.headers["Authorization"] = fresh.authorization
                yield request
