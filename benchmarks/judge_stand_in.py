"""A local stand-in for an LLM judge: it speaks the chat-completions protocol (no model runs).

It answers `true` for the passages that contain `state["needle"]`, or misbehaves as
`state["mode"]` says: `slow` (answers after `state["sleep"]` seconds), `error` (HTTP 500),
`garbage` (text that is not the verdict JSON), `drip` (one byte every 0.5 s for a minute),
`huge` (200 MB, then valid JSON). Used by tests/routes/policies/test_judge.py and
benchmarks/judge_deadline.py; every request it receives is appended to `state["requests"]`.
"""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse


def stand_in(state: dict) -> FastAPI:
    """The stand-in's app (see the module docstring)."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> Response:
        body = await request.json()
        state["requests"].append(body)
        mode = state.get("mode", "ok")
        if mode == "slow":
            await asyncio.sleep(state.get("sleep", 1.0))
        if mode == "error":
            return PlainTextResponse("upstream overloaded", status_code=500)
        if mode in ("drip", "huge"):
            return StreamingResponse(misbehave(state, mode), media_type="application/json")
        user = body["messages"][1]["content"]
        passages = user.split('<passage id="')[1:]
        verdicts = [{"id": i, "answers": state.get("needle", "\x00") in p} for i, p in enumerate(passages, start=1)]
        content = "I think they are fine" if mode == "garbage" else json.dumps({"verdicts": verdicts})
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": content}}]})

    return app


async def misbehave(state: dict, mode: str) -> AsyncIterator[bytes]:
    """A reply that drips one byte every 0.5 s for a minute, or floods 200 MB, then valid JSON."""
    state["streaming"] = True
    try:
        if mode == "drip":
            for _ in range(120):
                yield b" "
                await asyncio.sleep(0.5)
        else:
            chunk = b" " * (1 << 20)
            for _ in range(200):
                yield chunk
        yield json.dumps({"choices": [{"message": {"content": json.dumps({"verdicts": []})}}]}).encode()
    finally:
        state["streaming"] = False
