"""Test-server middleware.

GrantLog records every token-endpoint request as one JSON line, so tests can
count exactly how many refresh grants the server saw and when: "start" and
"t" (when the server began and finished it), grant type, status, error code,
the Cookie header it carried, the `resource` and `scope` it asked for;
"issued" (the access token's resources and scope, and the resources of the
refresh token that came with it) when it succeeded; for a refresh, "reuse"
(the refresh token it presented had already been used or revoked) and
"family_revoked" (no token of that refresh token's family is usable after
it). Token values are never recorded. Introspection calls are not logged.

SessionCookies makes refresh answers behave like a cookie-session login:
each refresh sets `sid` (path /, one hour) to one more than the `sid` it was
sent; a refresh without `sid` also sets `csrf` (a session cookie on the
default path /o/token) and `tracker` (one hour); a refresh that sends
`tracker` back gets it deleted (Max-Age=0)."""
import hashlib
import json
import os
import time

from django.conf import settings


class GrantLog:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        # Introspection (the test API's audience check) is no token request.
        if request.method != "POST" or not request.path.startswith("/o/") or request.path == "/o/introspect/":
            return self.get_response(request)
        start = time.time()
        grant = request.POST.get("grant_type", "")
        presented = refresh_token_row(request.POST.get("refresh_token", "")) if grant == "refresh_token" else None
        revoked_before = presented is not None and presented.revoked is not None
        response = self.get_response(request)
        error = None
        if response.status_code >= 400:
            try:
                error = json.loads(response.content).get("error")
            except ValueError:
                error = "non-json"
        entry = {"t": time.time(), "start": start, "path": request.path, "grant": grant,
                 "status": response.status_code, "error": error,
                 "cookie": request.META.get("HTTP_COOKIE", ""),
                 "resource": request.POST.getlist("resource"), "scope": request.POST.get("scope")}
        if request.path == "/o/token/" and response.status_code == 200:
            entry["issued"] = issued(response)
        if grant == "refresh_token":
            entry["reuse"] = revoked_before
            entry["family_revoked"] = presented is not None and family_revoked(presented.token_family)
        fd = os.open(settings.GRANT_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)
        return response


def checksum(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def refresh_token_row(token: str):
    from oauth2_provider.models import RefreshToken

    return RefreshToken.objects.filter(token_checksum=checksum(token)).order_by("-id").first() if token else None


def family_revoked(family) -> bool:
    from oauth2_provider.models import RefreshToken

    return not RefreshToken.objects.filter(token_family=family, revoked__isnull=True).exists()


def issued(response) -> dict:
    """What a successful token response stands for at the server (never the values)."""
    from oauth2_provider.models import AccessToken

    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    access = AccessToken.objects.filter(token_checksum=checksum(body.get("access_token", ""))).first()
    refresh = refresh_token_row(body.get("refresh_token", ""))
    return {"resource": access.resource if access else None, "scope": access.scope if access else None,
            "refresh_resource": refresh.resource if refresh else None}


class SessionCookies:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.method != "POST" or request.path != "/o/token/":
            return response
        if request.POST.get("grant_type") != "refresh_token":
            return response
        sent = request.COOKIES
        try:
            sid = int(sent.get("sid", "0")) + 1
        except ValueError:
            sid = 1
        response.set_cookie("sid", str(sid), max_age=3600, path="/", httponly=True, samesite="Lax")
        if "sid" not in sent:
            response.set_cookie("csrf", "c%d" % int(time.time() * 1000), path="/o/token")
            response.set_cookie("tracker", "1", max_age=3600, path="/")
        if "tracker" in sent:
            response.set_cookie("tracker", "", max_age=0, path="/")
        return response
