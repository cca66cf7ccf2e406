"""tokend-proxy and the upstream's cookies that tokend's jar rejects: they reach the client rather than
being lost (a session with accept-cookies = "never" takes none)."""
from conftest import free_port, login
from test_proxy import ProxyProcess
from test_proxy_upstreams import CookieSetter, get, jar


def test_cookies_the_jar_rejects_reach_the_client_with_one_warning(server, make_tokend, workdir):
    upstream = CookieSetter()
    daemon = make_tokend(server, **{"accept-cookies": '"never"'}).start()
    login(daemon, server)
    proxy = ProxyProcess(daemon, upstream.url, workdir, port=free_port())
    try:
        for name in ("first", "second"):
            status, fields, _ = get(proxy.port, f"/{name}")
            assert status == 200 and fields.get("set-cookie") == [f"{name}=1; Path=/"], fields
        assert jar(daemon, upstream.url) == [], "the jar took none: the session accepts no cookies"
        assert proxy.logs().count("tokend's jar rejected some of the upstream's cookies") == 1, proxy.logs()
    finally:
        proxy.stop()
        upstream.stop()
