"""POST /v1/feedback: the app's verdict on one of its answers (routes/service/feedback.py).

The body is the feedback tool's argument model and the work is the tool's handler, called
through the tool registry, so HTTP, the function tool and MCP accept and answer alike; errors
are the domain's (404 for a trace id not the caller's, 400 for a verdict that does not fit
the answer, 422 for a malformed body).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from quarry_client.models import FeedbackOut
from routes.http.api import body_model, current_caller, needs, served
from routes.service.audit import feedback_fields
from auth.caller import Caller
from routes.service.feedback import FEEDBACK_TOOL
from routes.service.schemas import error_responses
from routes.service.service import Service
from routes.service.tools import Toolset


def build_feedback_router(tools: Toolset) -> APIRouter:
    """The feedback endpoint (the `query` scope: whoever may ask may say how the answer served)."""
    router = APIRouter(prefix="/v1", tags=["feedback"], dependencies=[Depends(needs("query"))])
    spec = tools.specs[FEEDBACK_TOOL]

    @router.post("/feedback", response_model=FeedbackOut, responses=error_responses(400, 401, 403, 404, 413, 422, 429, 503),
                 summary="Report whether an answer served: answered, wrong_context or wrong_gap (by its trace id; "
                         "404 for a trace id not given to this caller)")
    @body_model(spec.args)
    async def feedback(body: Any, request: Request, caller: Caller = Depends(current_caller),
                       service: Service = Depends(served)) -> JSONResponse:
        with request.app.state.quarry.gate.enter(caller.gate_id):
            out = await run_in_threadpool(spec.run, service, caller.principal, body)
        request.state.audit = feedback_fields(body)
        return JSONResponse(out)

    return router
