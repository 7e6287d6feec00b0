"""The OpenAPI document is kept honest by fuzzing the real app against it with Schemathesis: for every
operation, generated requests (valid and invalid by the schema) must never get a server error, must get a
status code, content type and body that the document declares, and invalid ones must be refused with 4xx.

Schemathesis's positive_data_acceptance check is left out on purpose: a spec can match the JSON schema
and still be refused with 422 for what JSON schema cannot say (a shape naming an undefined size, a
restriction that is not a comparison), and that refusal is the gateway doing its job."""
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, negative_data_rejection,
                                               response_schema_conformance, status_code_conformance)

from services.gateway.app import create_app
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application.runtime import Runtime
from tests.fakes import RecordingBus

_home = Path(tempfile.mkdtemp(prefix="kforge-fuzz-"))
KEY = "fuzz-key"
# The gateway as deployed, with API keys: the document declares the X-API-Key scheme on every operation.
_runtime = Runtime(Settings(KFORGE_HOME=_home, REDIS_URL=None, DATABASE_URL=None, KFORGE_API_KEYS=KEY),
                   EventStore(f"sqlite:///{_home / 'events.db'}"), RecordingBus())
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(lambda: _runtime))


@schema.auth()
class ApiKey:
    """The key a client of this server holds; Schemathesis still tries requests without it."""

    def get(self, case, context):
        return KEY

    def set(self, case, data, context):
        case.headers = {**(case.headers or {}), "X-API-Key": data}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_to_the_openapi_document(case):
    case.call_and_validate(checks=CHECKS)
