"""A scripted stand-in for the Anthropic Messages API on loopback, so the real SDK can be tested offline.

A test queues the replies, in order, that POST /v1/messages gives; the server records every request it
received (parsed body and headers) so the test can check what the client sent. An empty queue answers
500 with a message saying so, which makes a test that sends more requests than it scripted fail loudly.
Use it through the `messages_api` fixture: `from tests.messages_api import messages_api` in a test module.
"""
import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

DEFAULT_MODEL = "claude-sonnet-4-6"


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = (("content-type", "application/json"),)
    delay_s: float = 0.0  # wait this long before answering, to make the client time out


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict | None  # None when the request body was not JSON


def error_body(error_type: str, message: str) -> dict:
    """The API's error shape: {"type": "error", "error": {"type": ..., "message": ...}}."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


class MessagesAPI:
    def __init__(self):
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.requests: list[Received] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True  # kept-alive client connections must not block close()
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        name="messages-api", daemon=True)  # short poll: quick close()
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # --- scripting ---------------------------------------------------------------------------------------
    def reply(self, status: int, body: dict | bytes, headers: dict[str, str] | None = None,
              delay_s: float = 0.0) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        content_type = "application/json" if isinstance(body, dict) else "text/plain; charset=utf-8"
        merged = {"content-type": content_type, **(headers or {})}
        with self._lock:
            self._replies.append(Reply(status, raw, tuple(merged.items()), delay_s))

    def message(self, content: list[dict], *, stop_reason: str = "end_turn", model: str = DEFAULT_MODEL,
                input_tokens: int = 1200, output_tokens: int = 400) -> None:
        self.reply(200, {
            "id": f"msg_local{next(self._ids):04d}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        })

    def answer(self, text: str, **kwargs) -> None:
        """A normal text answer, stop_reason end_turn (kwargs: model, input_tokens, output_tokens)."""
        self.message([{"type": "text", "text": text}], **kwargs)

    def cut_off(self, text: str, **kwargs) -> None:
        """A text answer that ran into max_tokens."""
        self.message([{"type": "text", "text": text}], stop_reason="max_tokens", **kwargs)

    def empty(self, **kwargs) -> None:
        """An answer with no content blocks at all."""
        self.message([], **kwargs)

    def rate_limited(self, retry_after: float | None = 2, message: str = "Number of request tokens has exceeded "
                                                                         "your per-minute rate limit") -> None:
        headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
        self.reply(429, error_body("rate_limit_error", message), headers)

    def overloaded(self, message: str = "Overloaded") -> None:
        self.reply(529, error_body("overloaded_error", message))

    def server_error(self, message: str = "Internal server error") -> None:
        self.reply(500, error_body("api_error", message))

    def unauthorized(self, message: str = "invalid x-api-key") -> None:
        self.reply(401, error_body("authentication_error", message))

    def stalled(self, delay_s: float) -> None:
        """An answer that comes only after delay_s: longer than the client's timeout, it is never read."""
        self.reply(200, error_body("api_error", "too late"), delay_s=delay_s)

    def not_json(self, text: str = "<html><body>502 Bad Gateway</body></html>", status: int = 200,
                 content_type: str = "text/html") -> None:
        """A body that is no JSON at all, e.g. a proxy's HTML page."""
        self.reply(status, text.encode(), {"content-type": content_type})

    # --- serving -----------------------------------------------------------------------------------------
    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self._replies:
                return self._replies.popleft()
        body = error_body("api_error", f"the test's script ran out: no reply queued for request "
                                       f"#{len(self.requests)}")
        return Reply(500, json.dumps(body).encode())


def _handler(api: MessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects

        def do_POST(self):  # noqa: N802 (http.server's naming)
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            received = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            if self.path.split("?")[0] != "/v1/messages":
                with api._lock:
                    api.requests.append(received)
                return self._send(Reply(404, json.dumps(error_body("not_found_error", self.path)).encode()))
            self._send(api._next(received))

        def _send(self, reply: Reply) -> None:
            if reply.delay_s:
                time.sleep(reply.delay_s)
            try:
                self.send_response(reply.status)
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a timeout test)
                self.close_connection = True

        def log_message(self, format, *args):  # keep test output quiet
            pass

    return Handler


@pytest.fixture
def messages_api():
    api = MessagesAPI()
    yield api
    api.close()
