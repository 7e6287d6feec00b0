"""The HTTP edge: one POST to a webhook URL, connected to an address checked beforehand.

The URL's host is replaced by the checked address and sent as the Host header (and, for https, as the
TLS server name, against which the certificate is still verified), so the request cannot go to an
address other than the one allowed. Redirects are not followed: they could lead anywhere.

The receiver is a stranger's server, so it may not hold a worker or fill its memory: one deadline covers
the whole attempt (connecting, sending and the whole answer, across every address tried), and of the
answer only its first MAX_ANSWER_BYTES are kept, as sent: it is asked for no compression
(Accept-Encoding: identity) and never decompressed, whatever it says it is."""
import asyncio
import ipaddress
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

from shared.adapters.webhook_addresses import IPAddress

# Of the receiver's answer, kept in the delivery history. The connection reads at most 64 KiB at a time
# (httpcore's read size), so an attempt holds about that much of an answer however long it is.
MAX_ANSWER_BYTES = 256


@dataclass(frozen=True)
class Answer:
    status_code: int
    text: str  # the start of the answer's body as read, marked when cut or left encoded


class Unreachable(Exception):
    """No answer: the connection failed, or the whole answer did not come within the deadline."""


class Sender(Protocol):
    def post(self, url: str, addresses: list[IPAddress], headers: dict[str, str], body: bytes,
             deadline_s: float) -> Answer: ...


class HttpSender:
    def post(self, url: str, addresses: list[IPAddress], headers: dict[str, str], body: bytes,
             deadline_s: float) -> Answer:
        return asyncio.run(_post(url, addresses, headers, body, deadline_s))


async def _post(url: str, addresses: list[IPAddress], headers: dict[str, str], body: bytes,
                deadline_s: float) -> Answer:
    parts = urlsplit(url)
    headers = {**headers, "host": parts.netloc.rpartition("@")[2], "accept-encoding": "identity"}
    tls = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    deadline = asyncio.get_running_loop().time() + deadline_s
    errors = []
    # httpx's own timeouts apply to each read, which a receiver dripping bytes resets forever: the deadline
    # below is the only limit.
    async with httpx.AsyncClient(timeout=None, follow_redirects=False, trust_env=False) as client:
        for address in addresses:  # the next address when one does not answer, as a browser would
            try:
                async with asyncio.timeout_at(deadline):
                    async with client.stream("POST", _pinned(url, address), content=body, headers=headers,
                                             extensions=tls) as response:
                        return Answer(response.status_code, await _start_of(response))
            except TimeoutError:
                errors.append(f"{address}: no whole answer within {deadline_s:g} s (KFORGE_WEBHOOK_TIMEOUT_S)")
                break
            except httpx.HTTPError as exc:
                errors.append(f"{address}: {type(exc).__name__} {exc}".strip())
    raise Unreachable("; ".join(errors) or "no address to connect to")


async def _start_of(response: httpx.Response) -> str:
    """The first MAX_ANSWER_BYTES of the body, raw: a compressed answer stays compressed, however small it
    would be to read and however large it would grow."""
    kept = b""
    async for chunk in response.aiter_raw():
        kept += chunk[:MAX_ANSWER_BYTES + 1 - len(kept)]
        if len(kept) > MAX_ANSWER_BYTES:
            break  # leaving the stream unread closes the connection: the rest is never received
    text = kept[:MAX_ANSWER_BYTES].decode("utf-8", "backslashreplace")
    encoding = response.headers.get("content-encoding", "identity")
    if encoding != "identity":
        text = f"[{encoding}, not decoded] {text}"
    return f"{text}… (cut at {MAX_ANSWER_BYTES} bytes)" if len(kept) > MAX_ANSWER_BYTES else text


def _pinned(url: str, address: IPAddress) -> str:
    parts = urlsplit(url)
    host = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
