"""Test-server middleware.

GrantLog records every token-endpoint request (grant type, status, error
code, the Cookie header it carried) as one JSON line, so tests can count
exactly how many refresh grants the server saw. Token values are never
recorded.

SessionCookies makes refresh answers behave like a cookie-session login:
each refresh sets `sid` (path /, one hour) to one more than the `sid` it was
sent; a refresh without `sid` also sets `csrf` (a session cookie on the
default path /o/token) and `tracker` (one hour); a refresh that sends
`tracker` back gets it deleted (Max-Age=0)."""
import json
import os
import time

from django.conf import settings


class GrantLog:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method != "POST" or not request.path.startswith("/o/"):
            return self.get_response(request)
        grant = request.POST.get("grant_type", "")
        response = self.get_response(request)
        error = None
        if response.status_code >= 400:
            try:
                error = json.loads(response.content).get("error")
            except ValueError:
                error = "non-json"
        line = json.dumps({"t": time.time(), "path": request.path, "grant": grant,
                           "status": response.status_code, "error": error,
                           "cookie": request.META.get("HTTP_COOKIE", "")})
        fd = os.open(settings.GRANT_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        return response


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
