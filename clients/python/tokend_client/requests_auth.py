"""`requests` auth: the session's token on every request (or its token for a
resource and scope); on a 401 with it, one compare-and-refresh of that key
through tokend and one retry."""
from typing import Any, Optional

import requests

from .client import Tokend
from .errors import LoginRequired, TargetRefused, UpstreamUnavailable


class TokendAuth(requests.auth.AuthBase):
    def __init__(self, tokend: Optional[Tokend] = None, session: Optional[str] = None,
                 min_valid: Optional[int] = None, resource: Optional[str] = None,
                 scope: Optional[str] = None) -> None:
        self.tokend = tokend or Tokend()
        self.session = session
        self.min_valid = min_valid
        self.resource = resource
        self.scope = scope

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        token = self.tokend.get_token(self.session, self.min_valid, self.resource, self.scope)
        request.headers["Authorization"] = token.authorization

        def retry_once(response: requests.Response, **kwargs: Any) -> requests.Response:
            if response.status_code != 401:
                return response
            try:
                fresh = self.tokend.refresh(self.session, token.generation, self.resource, self.scope)
            except (UpstreamUnavailable, LoginRequired, TargetRefused):
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
