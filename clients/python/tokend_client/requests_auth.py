"""`requests` auth: the session's token on every request (or its token for a
resource and scope); on a 401 with it, one compare-and-refresh of that key
through tokend and one retry — only from the origin the token was sent to:
a redirect to another origin carries no token (requests strips it), and its
401 is answered as it came. A DPoP-bound token (RFC 9449) goes with a proof
of each request, and a resource server's use_dpop_nonce gets one retry with
its nonce (no refresh)."""
from typing import Any, Optional

import requests

from .client import Tokend
from .dpop import nonce_asked
from .errors import LoginRequired, TargetRefused, UpstreamUnavailable
from .origin import origin
from .values import Token


class TokendAuth(requests.auth.AuthBase):
    def __init__(self, tokend: Optional[Tokend] = None, session: Optional[str] = None,
                 min_valid: Optional[int] = None, resource: Optional[str] = None,
                 scope: Optional[str] = None) -> None:
        self.tokend = tokend or Tokend()
        self.session = session
        self.min_valid = min_valid
        self.resource = resource
        self.scope = scope
        # Set once the session's tokens turn out DPoP-bound: from then on one GetProof per request.
        self._dpop = False

    def _authorize(self, request: requests.PreparedRequest, nonce: Optional[str] = None) -> Token:
        """Puts the token on `request`, and for a DPoP-bound one a proof of this very request."""
        if not self._dpop:
            token = self.tokend.get_token(self.session, self.min_valid, self.resource, self.scope)
            if not token.dpop_bound:
                request.headers["Authorization"] = token.authorization
                return token
            self._dpop = True
        proof, token = self.tokend.proof(request.method or "GET", request.url or "", self.session, self.resource, nonce)
        request.headers["Authorization"] = token.authorization
        request.headers["DPoP"] = proof
        return token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        token = self._authorize(request)
        asked = origin(request.url)

        def retry_once(response: requests.Response, **kwargs: Any) -> requests.Response:
            # requests copies this hook onto the requests of redirects it follows.
            if response.status_code != 401 or origin(response.request.url) != asked:
                return response
            again = response.request.copy()
            nonce = nonce_asked(response.status_code, response.headers) if token.dpop_bound else None
            if nonce is not None:
                self._authorize(again, nonce)  # the same token, a proof with the server's nonce
            else:
                try:
                    fresh = self.tokend.refresh(self.session, token.generation, self.resource, self.scope)
                except (UpstreamUnavailable, LoginRequired, TargetRefused):
                    return response  # tokend has nothing newer than the refused token: the 401 stands
                if fresh.access_token == token.access_token:
                    return response  # nothing newer to try
                if fresh.dpop_bound:
                    self._authorize(again)
                else:
                    again.headers["Authorization"] = fresh.authorization
            response.content  # read it, so that the connection can be reused
            response.close()
            again.hooks = {"response": []}
            retried = response.connection.send(again, **kwargs)
            retried.history.append(response)
            retried.request = again
            return retried

        request.register_hook("response", retry_once)
        return request

