"""A django-oauth-toolkit authorization server for tokend's tests and demo.

Everything that varies comes from the environment (see serve.py):
rotation and reuse protection are always on, as at the identity providers
tokend is built for.
"""
import os

BASE_DIR = os.environ["AUTHSERVER_DIR"]
SECRET_KEY = "tokend-test-server-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
    "authserver",
]
MIDDLEWARE = [
    "authserver.middleware.GrantLog",
    "authserver.middleware.SessionCookies",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "authserver.login.DevicePolling",
]
# The user's side of device and browser logins: a sign-in page, then DOT's
# approval pages (its own templates).
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
LOGIN_URL = "/accounts/login/"
ROOT_URLCONF = "authserver.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(BASE_DIR, "db.sqlite3"),
        "OPTIONS": {"timeout": 30},
    }
}
# Fast password hashing: tests create users, not protect them.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

OAUTH2_PROVIDER = {
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": int(os.environ.get("AUTHSERVER_GRACE", "0")),
    "ACCESS_TOKEN_EXPIRE_SECONDS": int(os.environ.get("AUTHSERVER_ACCESS_TTL", "3600")),
    "SCOPES": {"read": "read", "write": "write", "offline_access": "offline access", "profile": "profile",
               "email": "email"},
    "DEFAULT_SCOPES": ["read"],
    "OAUTH2_VALIDATOR_CLASS": "authserver.login.Validator",
    "OAUTH_DEVICE_VERIFICATION_URI": os.environ.get("AUTHSERVER_BASE", "") + "/o/device/",
    "OAUTH_DEVICE_VERIFICATION_URI_COMPLETE":
        lambda user_code: os.environ.get("AUTHSERVER_BASE", "") + "/o/device/?user_code=" + user_code,
    "DEVICE_FLOW_INTERVAL": int(os.environ.get("AUTHSERVER_DEVICE_INTERVAL", "1")),
}

# OpenID Connect (for oidc-agent in the benchmark): discovery at
# /o/.well-known/openid-configuration, id tokens signed with DIR/oidc.key.
if os.environ.get("AUTHSERVER_OIDC") == "1":
    with open(os.path.join(BASE_DIR, "oidc.key")) as key:
        OAUTH2_PROVIDER["OIDC_RSA_PRIVATE_KEY"] = key.read()
    OAUTH2_PROVIDER["OIDC_ENABLED"] = True
    OAUTH2_PROVIDER["SCOPES"]["openid"] = "OpenID Connect"

GRANT_LOG = os.path.join(BASE_DIR, "grants.jsonl")
LOGGING = {"version": 1, "disable_existing_loggers": False}
