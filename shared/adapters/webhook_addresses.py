"""Where a webhook may go: only to public addresses, unless configuration allows a network explicitly.

A webhook URL is the user's, so without this a job could make kforge's servers call their own
neighbours (the metadata service at 169.254.169.254, the database, a loopback admin port). Both the
submission (a clear 422) and each delivery check it; a delivery then connects to the very addresses
checked, so a name that resolves differently the second time (DNS rebinding) gains nothing.

An IPv6 address can carry an IPv4 address inside it (NAT64, 6to4, Teredo, the old compatible and
translated forms); a translator or relay on the way may deliver such a request to that IPv4 address, so
each embedded IPv4 address must pass too, not only the IPv6 address around it.
"""
import ipaddress
import socket
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 networks whose last 32 bits are an IPv4 address: IPv4-translated (RFC 2765), IPv4-compatible
# (RFC 4291, deprecated but still parsed) and the well-known NAT64 prefix (RFC 6052).
_LAST_32_BITS = [ipaddress.IPv6Network(n) for n in ("::ffff:0:0:0/96", "::/96", "64:ff9b::/96")]
# The local-use NAT64 prefix (RFC 8215): the operator picks the prefix length inside it, so the IPv4 address
# may sit after any RFC 6052 length the /48 allows.
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_NAT64_LOCAL_PREFIX_LENGTHS = (48, 56, 64)  # /96 is covered by the last 32 bits
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")
_TEREDO = ipaddress.IPv6Network("2001::/32")


class WebhookUrlRefused(ValueError):
    """The URL resolves to an address webhooks may not reach, or to none at all."""


def allowed_addresses(url: str, allowed_networks: list[str]) -> list[IPAddress]:
    """The addresses `url`'s host resolves to, each (and every IPv4 address embedded in it) public or inside
    one of `allowed_networks`."""
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
        if _allowed(address, networks):
            refused = [embedded for embedded in _embedded_ipv4(address) if not _allowed(embedded, networks)]
            if not refused:
                continue
            what = f"{address}, which embeds " + ", ".join(f"{a} ({_kind(a)} address)" for a in refused)
        else:
            what = f"{address} ({_kind(address)} address)"
        raise WebhookUrlRefused(f"{parts.hostname} resolves to {what}, where webhooks may not go; use a public URL, "
                                "or allow the network with KFORGE_WEBHOOK_ALLOWED_NETWORKS")
    return addresses


def _embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address that `address` may carry; none for an IPv4 address or a plain IPv6 one."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    found = []
    if any(address in network for network in _LAST_32_BITS + [_NAT64_LOCAL]):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address in _NAT64_LOCAL:
        # RFC 6052: the IPv4 address follows the prefix, skipping bits 64-71 (kept zero); drop them first.
        bits = int(address)
        squeezed = (bits >> 64) << 56 | bits & ((1 << 56) - 1)  # 120 bits
        found += [ipaddress.IPv4Address(squeezed >> (120 - length - 32) & 0xFFFFFFFF)
                  for length in _NAT64_LOCAL_PREFIX_LENGTHS]
    if address in _SIX_TO_FOUR:
        found.append(address.sixtofour)
    if address in _TEREDO:
        found += address.teredo  # the server, and the client (stored inverted; ipaddress undoes it)
    return list(dict.fromkeys(found))


def _plain(address: IPAddress) -> IPAddress:
    """An IPv4-mapped address (::ffff:127.0.0.1) is the IPv4 address itself to the socket: it is judged, and
    connected to, as that IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _allowed(address: IPAddress, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    return (address.is_global and not address.is_multicast) or any(address in network for network in networks)


def _kind(address: IPAddress) -> str:
    for kind in ("loopback", "link_local", "unspecified", "multicast", "reserved", "private"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return "non-public"
