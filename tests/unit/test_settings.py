"""Settings that must agree with each other are checked together when the settings are read."""
import pytest
from pydantic import ValidationError

from shared.adapters.settings import Settings


def test_webhook_retry_delays_must_be_below_the_visibility_timeout(tmp_path):
    with pytest.raises(ValidationError) as raised:
        Settings(KFORGE_HOME=tmp_path, KFORGE_VISIBILITY_TIMEOUT_S=600, KFORGE_WEBHOOK_RETRY_DELAYS_S="5,600")
    message = str(raised.value)
    assert "KFORGE_WEBHOOK_RETRY_DELAYS_S holds 600 s" in message and "KFORGE_VISIBILITY_TIMEOUT_S (600 s)" in message


def test_webhook_retry_delays_below_the_visibility_timeout_are_accepted(tmp_path):
    defaults = Settings(KFORGE_HOME=tmp_path)
    assert max(defaults.webhook_retry_delays_s) < defaults.visibility_timeout_s
    settings = Settings(KFORGE_HOME=tmp_path, KFORGE_VISIBILITY_TIMEOUT_S=6, KFORGE_WEBHOOK_RETRY_DELAYS_S="1,5.5")
    assert settings.webhook_retry_delays_s == [1.0, 5.5]
    assert Settings(KFORGE_HOME=tmp_path, KFORGE_WEBHOOK_RETRY_DELAYS_S="").webhook_retry_delays_s == []
