"""Starts the test authorization server on 127.0.0.1 and prepares it.

    python serve.py DIR PORT [--grace S] [--access-ttl S] [--workers N] [--oidc]
                    [--device-expires S] [--slow-down N] [--refresh-resources narrow|keep-wide]
                    [--keep-access-tokens]

Creates DIR/db.sqlite3, a user "alice" (password "alice-password") and a
confidential client "tokend-test" (secret "tokend-test-secret", stored
unhashed so tests are not slowed by PBKDF2), then runs gunicorn in the
foreground. Writes DIR/ready when it answers.

For interactive logins it also registers two public clients whose logins the
user approves on the server's pages (sign in at /accounts/login/):
"tokend-device" (device grant, verification at /o/device/) and
"tokend-browser" (authorization code with PKCE, redirect
http://127.0.0.1/callback on any port).

--refresh-resources says what a refresh does to RFC 8707 resources: "narrow"
(django-oauth-toolkit's own: the new refresh token keeps only the resources
the refresh named) or "keep-wide" (Entra ID's: one resource per access token,
the refresh token keeps them all); authserver/resources.py has the details.
--keep-access-tokens: rotating a refresh token leaves the access token issued
with it valid until it expires (DOT deletes it; keep-wide implies this).
"""
import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT_ID = "tokend-test"
CLIENT_SECRET = "tokend-test-secret"
USER, PASSWORD = "alice", "alice-password"
DEVICE_CLIENT, BROWSER_CLIENT = "tokend-device", "tokend-browser"


def migrated_database():
    """Puts a migrated, empty database in place. Django's migrations take seconds
    and every test starts a server, so a freshly migrated one is kept beside the
    venv (only in a venv), once per Django and django-oauth-toolkit version, and copied in;
    `migrate` still runs on the copy and finds nothing left to do. A kept copy
    SQLite cannot read is dropped and made again."""
    import django
    import oauth2_provider
    from django.conf import settings
    from django.core.management import call_command
    from django.db import DatabaseError, connection

    kept = os.path.join(sys.prefix, f"authserver-django{django.__version__}-dot{oauth2_provider.__version__}.sqlite3")
    target = settings.DATABASES["default"]["NAME"]
    fresh = not os.path.exists(target)
    if fresh and os.path.exists(kept):
        copy_whole(kept, target)
        try:
            call_command("migrate", verbosity=0, interactive=False)
            return
        except DatabaseError:
            connection.close()
            for path in (target, kept):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
    call_command("migrate", verbosity=0, interactive=False)
    if fresh and sys.prefix != sys.base_prefix:  # only a database made from nothing, only in a venv
        connection.close()
        with contextlib.suppress(OSError):  # not kept (a read-only prefix): the next start migrates again
            copy_whole(target, kept)


def copy_whole(source, target):
    """`source` to `target`, whole or not at all: a copy cut by a kill is never found in its place
    (a cut database would not be migrated from nothing, a cut kept copy would be copied in)."""
    partial = f"{target}.{os.getpid()}"
    try:
        with open(source, "rb") as origin, open(partial, "wb") as copy:
            shutil.copyfileobj(origin, copy)
            copy.flush()
            os.fsync(copy.fileno())
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)


def prepare(directory):
    import django

    django.setup()
    migrated_database()
    from authserver import resources

    resources.create_tables()
    from django.contrib.auth.models import User
    from oauth2_provider.models import Application

    if not User.objects.filter(username=USER).exists():
        User.objects.create_user(USER, email="alice@example.test", password=PASSWORD)
    rs256 = Application.RS256_ALGORITHM if os.environ.get("AUTHSERVER_OIDC") == "1" else ""
    Application.objects.update_or_create(
        client_id=DEVICE_CLIENT,
        defaults=dict(name="tokend (device login)", client_type=Application.CLIENT_PUBLIC,
                      authorization_grant_type=Application.GRANT_DEVICE_CODE, algorithm=rs256,
                      client_secret="", redirect_uris="", skip_authorization=False),
    )
    Application.objects.update_or_create(
        client_id=BROWSER_CLIENT,
        defaults=dict(name="tokend (browser login)", client_type=Application.CLIENT_PUBLIC,
                      authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE, algorithm=rs256,
                      client_secret="", redirect_uris="http://127.0.0.1/callback", skip_authorization=False),
    )
    Application.objects.update_or_create(
        client_id=CLIENT_ID,
        defaults=dict(
            name="tokend test client",
            client_type=Application.CLIENT_CONFIDENTIAL,
            authorization_grant_type=Application.GRANT_PASSWORD,
            client_secret=CLIENT_SECRET,
            algorithm=Application.RS256_ALGORITHM if os.environ.get("AUTHSERVER_OIDC") == "1" else "",
            hash_client_secret=False,
            redirect_uris="",
        ),
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("port", type=int)
    parser.add_argument("--grace", type=int, default=0)
    parser.add_argument("--access-ttl", type=int, default=3600)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--oidc", action="store_true", help="enable OpenID Connect (RS256 id tokens)")
    parser.add_argument("--device-expires", type=int, default=1800, help="device code lifetime (s)")
    parser.add_argument("--slow-down", type=int, default=0, help="answer slow_down to the first N polls of a device code")
    parser.add_argument("--refresh-resources", choices=["narrow", "keep-wide"], default="narrow",
                        help="what a refresh does to the refresh token's resources (RFC 8707)")
    parser.add_argument("--keep-access-tokens", action="store_true",
                        help="rotation does not revoke the access token issued with the rotated refresh token")
    args = parser.parse_args()
    directory = os.path.abspath(args.directory)
    os.makedirs(directory, exist_ok=True)
    if args.oidc:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        with open(os.path.join(directory, "oidc.key"), "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
        os.environ["AUTHSERVER_OIDC"] = "1"
    env = dict(os.environ, AUTHSERVER_DIR=directory, AUTHSERVER_GRACE=str(args.grace),
               AUTHSERVER_ACCESS_TTL=str(args.access_ttl), DJANGO_SETTINGS_MODULE="authserver.settings",
               AUTHSERVER_BASE=f"http://127.0.0.1:{args.port}", AUTHSERVER_DEVICE_EXPIRES=str(args.device_expires),
               AUTHSERVER_SLOW_DOWN=str(args.slow_down), AUTHSERVER_REFRESH_RESOURCES=args.refresh_resources,
               AUTHSERVER_KEEP_ACCESS_TOKENS="1" if args.keep_access_tokens else "0",
               PYTHONPATH=HERE)
    os.environ.update(env)
    sys.path.insert(0, HERE)
    prepare(directory)
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--no-control-socket", "--bind", f"127.0.0.1:{args.port}",
         "--workers", str(args.workers), "--log-level", "warning", "authserver.wsgi:application"],
        env=env, cwd=HERE)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{args.port}/o/token/", timeout=1)
        except urllib.error.HTTPError:
            break  # 405 for GET: it answers
        except OSError:
            time.sleep(0.1)
    open(os.path.join(directory, "ready"), "w").close()
    try:
        sys.exit(server.wait())
    except KeyboardInterrupt:
        server.terminate()
        sys.exit(server.wait())


if __name__ == "__main__":
    main()
