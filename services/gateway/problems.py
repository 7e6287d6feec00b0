"""Every error the gateway answers is JSON: a Problem, or a ValidationProblem naming each field at fault. An
unexpected error included: its details go to the log, not the client."""
import logging
from uuid import uuid4

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.gateway.schemas import FieldErrorPublic, Problem, ValidationProblem
from shared.adapters.eventstore import UnreadableEvent
from shared.domain.errors import field_errors

log = logging.getLogger(__name__)

RETRY_AFTER_S = 30  # what a refused submission or stream is told to wait: long enough for some to finish

# What any operation under /v1 may answer before its handler runs (the middleware and the key check).
V1_RESPONSES = {400: {"model": Problem, "description": "a body that cannot be read as JSON text, "
                                                       "or a Host this server does not answer to"},
                401: {"model": Problem, "description": "a missing or unknown API key"},
                413: {"model": Problem, "description": "a request body over the size limit"},
                415: {"model": Problem, "description": "a POST without Content-Type: application/json"},
                422: {"model": ValidationProblem, "description": "invalid fields, each named"}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return invalid_fields([FieldErrorPublic(field=e.field, message=e.message)
                               for e in field_errors(_strip_body(exc.errors()))])

    @app.exception_handler(StarletteHTTPException)  # Starlette's own (an unknown path) as well as FastAPI's
    async def _problem(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Every 422 has one shape, ValidationProblem, whether a field failed validation or a report
        # refused an argument; other errors are a Problem.
        body = ValidationProblem(detail=exc.detail, errors=[]) if exc.status_code == 422 else Problem(detail=exc.detail)
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(UnreadableEvent)
    async def _unreadable(_: Request, exc: UnreadableEvent) -> JSONResponse:
        # A stored event this build cannot read: the job is there, its history cannot be shown whole.
        detail = f"{exc}; this kforge may be older than the one that recorded it"
        return JSONResponse(Problem(detail=detail).model_dump(), status_code=status.HTTP_500_INTERNAL_SERVER_ERROR)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        incident = uuid4().hex[:12]
        log.error("incident %s: %s %s failed", incident, request.method, request.url.path,
                  exc_info=(type(exc), exc, exc.__traceback__))
        detail = f"the server failed to answer (incident {incident}, in its log); retry, or report the incident"
        return JSONResponse(Problem(detail=detail).model_dump(), status_code=status.HTTP_500_INTERNAL_SERVER_ERROR)


def too_many(detail: str) -> JSONResponse:
    return JSONResponse(Problem(detail=detail).model_dump(), status_code=status.HTTP_429_TOO_MANY_REQUESTS,
                        headers={"Retry-After": str(RETRY_AFTER_S)})


def invalid_fields(errors: list[FieldErrorPublic]) -> JSONResponse:
    problem = ValidationProblem(detail=f"{len(errors)} invalid field(s)", errors=errors)
    return JSONResponse(problem.model_dump(), status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)


def _strip_body(errors) -> list:
    """FastAPI prefixes body fields with 'body'; users know their fields without it. A JSON syntax error's
    location is a character offset, which belongs in the message, not the field."""
    out = []
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] == "json_invalid":
            offset = f" at character {loc[1]}" if len(loc) > 1 else ""
            error = {**error, "msg": f"the request body is not valid JSON{offset}: send the spec as a JSON object"}
            loc = ()
        out.append({**error, "loc": loc[1:] if loc[:1] == ("body",) else loc})
    return out
