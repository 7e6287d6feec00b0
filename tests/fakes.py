"""Local stand-ins for ports whose real adapters need other processes."""
from shared.contracts import Message


class RecordingBus:
    """The bus port kept in memory: what a handler sends is what a test inspects."""

    def __init__(self):
        self.messages: list[Message] = []

    def dispatch(self, message: Message) -> None:
        self.messages.append(message)
