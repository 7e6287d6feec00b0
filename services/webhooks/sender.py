"""The HTTP edge: one POST to a webhook URL, connected to an address checked beforehand.

The URL's host is replaced by the checked address and sent as the Host header (and, for https, as the
TLS server name, against which the certificate is still verified), so the request cannot go to an
address other than the one allowed. Redirects are not followed: they could lead anywhere."""
import ipaddress
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

from shared.webhook_addresses import IPAddress

MAX_ANSWER_CHARS = 200  # of the receiver's answer, kept in the delivery history


@dataclass(frozen=True)
class Answer:
    status_code: int
    text: str


class Unreachable(Exception):
    """No answer: the connection failed or timed out."""


class Sender(Protocol):
    def post(self, url: str, addresses: list[IPAddress], headers: dict[str, str], body: bytes,
             timeout_s: float) -> Answer: ...


class HttpSender:
    def post(self, url: str, addresses: list[IPAddress], headers: dict[str, str], body: bytes,
             timeout_s: float) -> Answer:
        parts = urlsplit(url)
        errors = []
        with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
            for address in addresses:  # the next address when one does not answer, as a browser would
                try:
                    response = client.post(_pinned(url, address), content=body,
                                           headers={**headers, "host": parts.netloc.rpartition("@")[2]},
                                           extensions={"sni_hostname": parts.hostname} if parts.scheme == "https"
                                           else {})
                except httpx.HTTPError as exc:
                    errors.append(f"{address}: {type(exc).__name__} {exc}".strip())
                    continue
                return Answer(response.status_code, response.text[:MAX_ANSWER_CHARS])
        raise Unreachable("; ".join(errors) or "no address to connect to")


def _pinned(url: str, address: IPAddress) -> str:
    parts = urlsplit(url)
    host = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
