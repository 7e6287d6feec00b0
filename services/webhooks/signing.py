"""Standard Webhooks signatures (standardwebhooks.com): the receiver recomputes an HMAC-SHA256 over
`<webhook-id>.<webhook-timestamp>.<body>` with the shared secret and compares it with webhook-signature."""
import base64
import hashlib
import hmac


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """`secret` is whsec_ followed by the base64 key, as Standard Webhooks libraries take it."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def signed_headers(secret: str, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {"webhook-id": webhook_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature(secret, webhook_id, timestamp, body),
            "content-type": "application/json", "user-agent": "kforge-webhooks"}
