"""`httpx` auth, for Client and AsyncClient: the session's token on every
request (or its token for a resource and scope); on a 401 with it, one
compare-and-refresh of that key through tokend and one retry."""
from typing import AsyncGenerator, Generator, Optional

import httpx

from .client import AsyncTokend, Tokend
from .errors import LoginRequired, TargetRefused, UpstreamUnavailable


class TokendAuth(httpx.Auth):
    # The body is kept so that the request can be sent again after a refresh.
    requires_request_body = True

    def __init__(self, tokend: Optional[Tokend] = None, async_tokend: Optional[AsyncTokend] = None,
                 session: Optional[str] = None, min_valid: Optional[int] = None, resource: Optional[str] = None,
                 scope: Optional[str] = None) -> None:
        self._tokend = tokend
        self._async_tokend = async_tokend
        self.session = session
        self.min_valid = min_valid
        self.resource = resource
        self.scope = scope

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        tokend = self._tokend = self._tokend or Tokend()
        token = tokend.get_token(self.session, self.min_valid, self.resource, self.scope)
        request.headers["Authorization"] = token.authorization
        response = yield request
        if response.status_code == 401:
            # tokend has nothing newer than the refused token: the 401 stands.
            try:
                fresh = tokend.refresh(self.session, token.generation, self.resource, self.scope)
            except (UpstreamUnavailable, LoginRequired, TargetRefused):
                return
            if fresh.access_token != token.access_token:
                request.headers["Authorization"] = fresh.authorization
                yield request

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        tokend = self._async_tokend = self._async_tokend or AsyncTokend()
        token = await tokend.get_token(self.session, self.min_valid, self.resource, self.scope)
        request.headers["Authorization"] = token.authorization
        response = yield request
        if response.status_code == 401:
            try:
                fresh = await tokend.refresh(self.session, token.generation, self.resource, self.scope)
            except (UpstreamUnavailable, LoginRequired, TargetRefused):
                return
            if fresh.access_token != token.access_token:
                request.headers["Authorization"] = fresh.authorization
                yield request
