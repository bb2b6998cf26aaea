"""Who may talk to memq serve: trace_processor_shell's security model plus a Host check.

* The socket listens on 127.0.0.1 only (a peer that is not loopback is refused too).
* `Host` must name the loopback interface (127.0.0.1, localhost or [::1], any port):
  a web page whose own domain was re-pointed at 127.0.0.1 (DNS rebinding) sends
  its own name there and is refused.
* `Origin`, which browsers send on cross-origin requests and on every WebSocket
  handshake, must be on the allow-list: the UI this server hands out
  (http://127.0.0.1:PORT and http://localhost:PORT), https://ui.perfetto.dev, and
  origins added by flag. A WebSocket handshake without an allowed Origin is refused,
  as trace_processor_shell does; other requests without Origin (curl) are served.
"""
from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass

from ctf2perfetto.errors import UsageError
from ctf2perfetto.look.browser import host_allowed

PERFETTO_UI_ORIGIN = "https://ui.perfetto.dev"


def normalize_origin(text: str) -> str:
    """`scheme://host[:port]` in lower case, as browsers send it; UsageError for anything else."""
    parts = urllib.parse.urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(f"--allow-origin {text!r}: not an origin (expected scheme://host[:port], "
                         "e.g. http://127.0.0.1:10000)")
    try:
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"--allow-origin {text!r}: bad port") from exc
    default_port = {"http": 80, "https": 443}[parts.scheme]
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default_port) else "")


@dataclass(frozen=True)
class AccessPolicy:
    """The allowed origins; `problem()` says why a request is refused (None: allowed)."""

    origins: tuple[str, ...]

    @classmethod
    def for_port(cls, port: int, extra: tuple[str, ...] = ()) -> "AccessPolicy":
        """Defaults for a server on 127.0.0.1:`port` (which also serves the UI), plus `extra` origins."""
        local = (f"http://127.0.0.1:{port}", f"http://localhost:{port}")
        origins = [*local, PERFETTO_UI_ORIGIN, *(normalize_origin(o) for o in extra)]
        return cls(tuple(dict.fromkeys(origins)))

    def origin_allowed(self, origin: str | None) -> bool:
        return origin is not None and origin.strip().lower() in self.origins

    def problem(self, peer: str, host_header: str | None, origin: str | None, origin_required: bool) -> str | None:
        """Why a request from `peer` (an IP address) with these headers is refused, or None."""
        try:
            loopback = ipaddress.ip_address(peer).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            return f"connection from {peer}: only this machine may connect (use ssh -L from elsewhere)"
        if host_header is None:
            return "no Host header"
        if not host_allowed(host_header):
            return (f"Host {host_header!r} is not 127.0.0.1, localhost or [::1] "
                    "(a page that re-pointed its domain at this machine?)")
        if origin is None:
            return "a WebSocket without an Origin header" if origin_required else None
        if not self.origin_allowed(origin):
            return f"Origin {origin!r} is not allowed (add it with --allow-origin)"
        return None
