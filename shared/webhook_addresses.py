"""Where a webhook may go: only to public addresses, unless configuration allows a network explicitly.

A webhook URL is the user's, so without this a job could make kforge's servers call their own
neighbours (the metadata service at 169.254.169.254, the database, a loopback admin port). Both the
submission (a clear 422) and each delivery check it; a delivery then connects to the very addresses
checked, so a name that resolves differently the second time (DNS rebinding) gains nothing.
"""
import ipaddress
import socket
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class WebhookUrlRefused(ValueError):
    """The URL resolves to an address webhooks may not reach, or to none at all."""


def allowed_addresses(url: str, allowed_networks: list[str]) -> list[IPAddress]:
    """The addresses `url`'s host resolves to, each public or inside one of `allowed_networks`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookUrlRefused(f"{url!r} is not an http(s) URL with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise WebhookUrlRefused(f"{parts.hostname} does not resolve ({exc.strerror}): use a name this server "
                                "can look up") from None
    addresses = list(dict.fromkeys(_plain(ipaddress.ip_address(info[4][0])) for info in infos))
    networks = [ipaddress.ip_network(n, strict=False) for n in allowed_networks]
    for address in addresses:
        if not _public(address) and not any(address in network for network in networks):
            raise WebhookUrlRefused(
                f"{parts.hostname} resolves to {address} ({_kind(address)} address), where webhooks may not go; "
                "use a public URL, or allow the network with KFORGE_WEBHOOK_ALLOWED_NETWORKS")
    return addresses


def _plain(address: IPAddress) -> IPAddress:
    """An IPv4 address written as IPv6 (::ffff:127.0.0.1) is judged as the IPv4 address it is."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _public(address: IPAddress) -> bool:
    return address.is_global and not address.is_multicast


def _kind(address: IPAddress) -> str:
    for kind in ("loopback", "link_local", "unspecified", "multicast", "reserved", "private"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return "non-public"
