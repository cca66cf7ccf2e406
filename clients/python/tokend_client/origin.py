"""Whose 401 a retry answers: the auth classes refresh and retry only for the
origin the token was sent to, never for a redirect's other origin."""
from typing import Optional
from urllib.parse import urlsplit


def origin(url: Optional[str]) -> tuple[str, str, Optional[int]]:
    """Scheme, host and port of `url`, the default port written out."""
    parts = urlsplit(url or "")
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port
