"""`requests` auth: the session's token on every request; on a 401 with it,
one compare-and-refresh through tokend and one retry."""
from typing import Any, Optional

import requests

from .client import Tokend
from .errors import LoginRequired, UpstreamUnavailable


class TokendAuth(requests.auth.AuthBase):
    def __init__(self, tokend: Optional[Tokend] = None, session: Optional[str] = None,
                 min_valid: Optional[int] = None) -> None:
        self.tokend = tokend or Tokend()
        self.session = session
        self.min_valid = min_valid

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        token = self.tokend.get_token(self.session, self.min_valid)
        request.headers["Authorization"] = token.authorization

        def retry_once(response: requests.Response, **kwargs: Any) -> requests.Response:
            if response.status_code != 401:
                return response
            try:
                fresh = self.tokend.refresh(self.session, stale_generation=token.generation)
            except (UpstreamUnavailable, LoginRequired):
                return response  # tokend has nothing newer than the refused token: the 401 stands
            if fresh.access_token == token.access_token:
                return response  # nothing newer to try
            response.content  # read it, so that the connection can be reused
            response.close()
            again = response.request.copy()
            again.headers["Authorization"] = fresh.authorization
            again.hooks = {"response": []}
            retried = response.connection.send(again, **kwargs)
            retried.history.append(response)
            retried.request = again
            return retried

        request.register_hook("response", retry_once)
        return request
