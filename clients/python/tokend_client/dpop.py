"""DPoP (RFC 9449) for the auth classes: a resource server's request for a nonce."""
from typing import Mapping, Optional


def nonce_asked(status: int, headers: Mapping[str, str]) -> Optional[str]:
    """The nonce a resource server asks proofs to carry: a 401 whose
    WWW-Authenticate names use_dpop_nonce, with the nonce in DPoP-Nonce (§9)."""
    if status != 401 or "use_dpop_nonce" not in (headers.get("WWW-Authenticate") or ""):
        return None
    return headers.get("DPoP-Nonce") or None
