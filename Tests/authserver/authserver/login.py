"""What the test server adds for interactive logins (device and browser).

django-oauth-toolkit 3.4.1 with oauthlib 4.0.1 needs three things for the
device grant that it does not do itself:
- its device-authorization view builds DeviceCodeResponse(**response), and
  oauthlib echoes `scope` in that response, which the dataclass rejects
  (HTTP 500): unknown keys are dropped;
- oauthlib 4 asks the validator validate_device_code(), which DOT does not
  implement: Validator does (look the grant up, set user and scopes);
- an expired device code stays "authorization pending" forever: DevicePolling
  answers expired_token for it (RFC 8628 §3.5), and, for tests, slow_down
  for the first AUTHSERVER_SLOW_DOWN polls of every device code.
The device authorization request's `resource` parameters (RFC 8707), which
DOT drops, are kept for the device-code exchange (resources.py, which also
holds what a refresh does to resources).
"""
import dataclasses
import hashlib
import json
import os

from django import http
from django.conf import settings
from oauth2_provider import models
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauth2_provider.views import device as device_views
from oauthlib.oauth2 import DeviceApplicationServer

from authserver import resources

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def _device_code_response(**fields):
    known = {f.name for f in dataclasses.fields(models.DeviceCodeResponse)}
    return models.DeviceCodeResponse(**{k: v for k, v in fields.items() if k in known})


device_views.DeviceCodeResponse = _device_code_response


class DeviceServer(DeviceApplicationServer):
    """Device codes live AUTHSERVER_DEVICE_EXPIRES seconds (oauthlib's 1800 otherwise)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._expires_in = int(os.environ.get("AUTHSERVER_DEVICE_EXPIRES", "1800"))


class DeviceAuthorizationView(device_views.DeviceAuthorizationView):
    server_class = DeviceServer

    def post(self, request, *args, **kwargs):
        asked = request.POST.getlist("resource")
        invalid = resources.invalid_resources(asked)
        if invalid:
            return http.JsonResponse({"error": "invalid_target",
                                      "error_description": f"The resource '{invalid[0]}' is not an absolute URI"},
                                     status=400)
        response = super().post(request, *args, **kwargs)
        if response.status_code == 200 and asked:
            resources.remember_device_resources(json.loads(response.content)["device_code"], asked)
        return response


class Validator(resources.ResourceRules, OAuth2Validator):
    oidc_claim_scope = dict(OAuth2Validator.oidc_claim_scope or {}, preferred_username="profile", email="email")

    def validate_device_code(self, client_id, code, request, *args, **kwargs):
        grant = models.get_device_grant_model().objects.filter(client_id=client_id, device_code=code).first()
        if grant is None:
            return None
        if grant.status != grant.AUTHORIZED:
            return {"denied": "access_denied", "expired": "expired_token"}.get(grant.status, "authorization_pending")
        request.user = grant.user
        request.scopes = (grant.scope or "").split()
        return "authorized"

    def get_additional_claims(self, request):
        return {"preferred_username": request.user.username, "email": request.user.email}


class DevicePolling:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method == "POST" and request.path == "/o/token/" and request.POST.get("grant_type") == DEVICE_GRANT:
            early = self.answer_early(request.POST.get("device_code", ""))
            if early:
                return http.HttpResponse(json.dumps({"error": early}), status=400, content_type="application/json")
        return self.get_response(request)

    @staticmethod
    def answer_early(device_code):
        grant = models.get_device_grant_model().objects.filter(device_code=device_code).first()
        if grant is None:
            return None
        if grant.status == grant.AUTHORIZATION_PENDING and grant.is_expired():
            grant.status = grant.EXPIRED
            grant.save(update_fields=["status"])
            return "expired_token"
        slow_downs = int(os.environ.get("AUTHSERVER_SLOW_DOWN", "0"))
        if slow_downs:
            counter = os.path.join(settings.BASE_DIR, "slowdown-" + hashlib.sha256(device_code.encode()).hexdigest()[:16])
            count = int(open(counter).read()) if os.path.exists(counter) else 0
            if count < slow_downs:
                with open(counter, "w") as f:
                    f.write(str(count + 1))
                return "slow_down"
        return None
