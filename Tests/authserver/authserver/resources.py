"""RFC 8707 resource indicators at the test server: what a refresh does to
them, and the device grant's resources.

AUTHSERVER_REFRESH_RESOURCES (serve.py --refresh-resources) chooses what a
refresh does:

- "narrow" (the default) is django-oauth-toolkit 3.4.1 as it is: a refresh
  naming resources gets an access token AND a new refresh token restricted to
  them, so a later refresh naming any other resource is refused
  invalid_target; a refresh naming none keeps the refresh token's list. Scope
  narrows the same way (the new refresh token's scope is its access token's).
- "keep-wide" is Entra ID's: an access token covers at most one resource; a
  refresh names one (or none: it gets the first of the refresh token's list),
  a refresh naming several is refused invalid_target ("one resource per
  token"); the new refresh token keeps the full resource list and the grant's
  full scope, whatever the refresh asked for. The grant's first token request
  (code, device code or password) is where the list is set, so it may name
  several: its access token gets the first of them, its refresh token all.
  Access tokens live until they expire: rotating a refresh token does not
  revoke the access token issued with it, so a token for one resource
  outlives the refreshes for the others.

Rotation in narrow mode deletes the access token issued with the rotated
refresh token, as DOT does, unless AUTHSERVER_KEEP_ACCESS_TOKENS=1 (serve.py
--keep-access-tokens; always so in keep-wide).

Both keep rotation and reuse protection (settings.py).

django-oauth-toolkit's device authorization endpoint drops `resource`;
`remember_device_resources` keeps it (table authserver_device_resource) and
the device-code exchange inherits it, as the code exchange does from its
authorization request. The grant's scope per token family is kept in
authserver_family_scope for keep-wide.
"""
import json
import os

from django.db import connection
from oauth2_provider.oauth2_validators import is_valid_resource_uri
from oauthlib.oauth2.rfc6749 import errors

NARROW, KEEP_WIDE = "narrow", "keep-wide"
MODE = os.environ.get("AUTHSERVER_REFRESH_RESOURCES", NARROW)
KEEP_ACCESS_TOKENS = MODE == KEEP_WIDE or os.environ.get("AUTHSERVER_KEEP_ACCESS_TOKENS") == "1"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
FIRST_GRANTS = ("authorization_code", DEVICE_GRANT, "password")

TABLES = (
    "create table if not exists authserver_device_resource (device_code text primary key, resource text not null)",
    "create table if not exists authserver_family_scope (family text primary key, scope text not null)",
)


def create_tables() -> None:
    with connection.cursor() as cursor:
        for statement in TABLES:
            cursor.execute(statement)


def invalid_resources(resources: list[str]) -> list[str]:
    return [r for r in resources if not is_valid_resource_uri(r)]


def remember_device_resources(device_code: str, resources: list[str]) -> None:
    with connection.cursor() as cursor:
        cursor.execute("insert or replace into authserver_device_resource values (%s, %s)",
                       [device_code, json.dumps(resources)])


def device_resources(device_code: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("select resource from authserver_device_resource where device_code = %s", [device_code])
        row = cursor.fetchone()
    return json.loads(row[0]) if row else []


def family_scope(family) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("select scope from authserver_family_scope where family = %s", [str(family)])
        row = cursor.fetchone()
    return row[0] if row else None


def asked_resources(request) -> list[str]:
    """The `resource` parameters as sent (oauthlib keeps only the last of repeated ones)."""
    return [value for key, value in (getattr(request, "decoded_body", None) or []) if key == "resource"]


def refused(request, description: str) -> errors.CustomOAuth2Error:
    return errors.CustomOAuth2Error(error="invalid_target", description=description, request=request)


class ResourceRules:
    """Mixed into the server's OAuth2Validator (login.Validator)."""

    def _check_and_set_request_resource(self, request):
        super()._check_and_set_request_resource(request)
        if request.grant_type == DEVICE_GRANT:
            self._inherit_device_resources(request)
        if MODE != KEEP_WIDE:
            return
        if request.grant_type == "refresh_token":
            wide = list(getattr(request.refresh_token_instance, "resource", None) or [])
            asked = asked_resources(request)
            if len(asked) > 1:
                raise refused(request, "one resource per token")
            request.resource = asked or wide[:1]
            request.refresh_resources = wide
        elif request.grant_type in FIRST_GRANTS:
            request.refresh_resources = list(request.resource)
            request.resource = request.resource[:1]

    def _inherit_device_resources(self, request):
        granted = device_resources(getattr(request, "device_code", "") or "")
        if not granted:
            return
        for resource in request.resource:
            if resource not in granted:
                raise refused(request, f"The requested resource '{resource}' is not allowed: "
                                       "the device authorization did not name it")
        request.resource = request.resource or granted

    def _save_bearer_token(self, token, request, *args, **kwargs):
        presented = getattr(request, "refresh_token_instance", None)
        if KEEP_ACCESS_TOKENS and request.grant_type == "refresh_token" and presented is not None:
            # DOT's rotation revokes the presented token's access token through this link;
            # unlinked (in the same transaction, after validation), that access token lives on.
            type(presented).objects.filter(pk=presented.pk).update(access_token=None)
        return super()._save_bearer_token(token, request, *args, **kwargs)

    def _create_refresh_token(self, request, refresh_token_code, access_token, previous_refresh_token):
        token = super()._create_refresh_token(request, refresh_token_code, access_token, previous_refresh_token)
        wide = getattr(request, "refresh_resources", None)
        if wide is not None and wide != token.resource:
            token.resource = wide
            token.save(update_fields=["resource"])
        if MODE == KEEP_WIDE and previous_refresh_token is None:
            with connection.cursor() as cursor:
                cursor.execute("insert or ignore into authserver_family_scope values (%s, %s)",
                               [str(token.token_family), access_token.scope])
        return token

    def get_original_scopes(self, refresh_token, request, *args, **kwargs):
        if MODE == KEEP_WIDE:
            scope = family_scope(request.refresh_token_instance.token_family)
            if scope is not None:
                return scope
        return super().get_original_scopes(refresh_token, request, *args, **kwargs)
