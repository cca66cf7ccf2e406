"""Records every token-endpoint request (grant type, status, error code) as
one JSON line, so tests can count exactly how many refresh grants the server
saw. Token values are never recorded."""
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
                           "status": response.status_code, "error": error})
        fd = os.open(settings.GRANT_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        return response
