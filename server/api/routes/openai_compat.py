"""OpenAI-compatible endpoints: GET /v1/models and POST /v1/chat/completions (plain and SSE).

Any chat client (Cherry Studio, ChatBox, Open WebUI, LobeChat, the `openai` SDK) runs a whole mock
interview through them; the conversation protocol is server/interview/chat.py. The bearer token
is the API key off loopback (checked by the guard middleware before any body is read). The turn
is committed before the first byte of the reply, streamed or not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import IntegrityError

from server.api.auth import current_user
from server.api.errors import ApiError
from server.api.routes.grading import check_answer_size, run_queued
from server.interview.chat import ChatError, ChatInterview, ChatReply, model_catalogue
from server.interview.engine import InterviewError
from server.services import Services

router = APIRouter(prefix="/v1", tags=["openai-compatible"])
User = Annotated[str, Depends(current_user)]
STREAM_PIECE_CHARS = 24  # how the finished reply is cut into SSE chunks


# ---------- request / response models (the subset of the OpenAI schema a chat client sends) ----------


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if p.type == "text" and p.text)


class ChatCompletionRequest(BaseModel):
    # Sampling options (temperature, top_p, max_tokens, ...) are accepted and ignored: the
    # interviewer's lines are decided by the engine, not sampled.
    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=2000)
    stream: bool = False


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "sparring"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: Literal["stop"] = "stop"


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class SparringInfo(BaseModel):
    """Non-standard extra (clients ignore it): which session and exchange this reply is."""

    session_id: str | None
    exchange: int | None
    replayed: bool
    meta: dict[str, Any] = Field(default_factory=dict)


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    sparring: SparringInfo


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: Literal["stop"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]


# ---------- errors in OpenAI's shape ----------

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}


def openai_error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    body = {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "server_error"),
            "param": None,
            "code": code,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc or 'request'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts[:5]) or "invalid request"


# ---------- routes ----------


def _svc(request: Request) -> Services:
    return request.app.state.services


@router.get("/models", response_model=ModelList)
def list_models(request: Request, user: User) -> ModelList:
    svc = _svc(request)
    created = int(svc.settings.data_dir.stat().st_mtime) if svc.settings.data_dir.exists() else 0
    areas = sorted({e.area.value for e in svc.bank})
    return ModelList(data=[ModelCard(id=m.id, created=created) for m in model_catalogue(areas)])


@router.post("/chat/completions", response_model=ChatCompletion)
async def chat_completions(request: Request, user: User):
    svc = _svc(request)
    try:
        raw = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return openai_error(400, "invalid_json", "the request body is not valid JSON")
    try:
        body = ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        return openai_error(400, "invalid_request", _describe(exc))
    messages = [(m.role, m.text()) for m in body.messages if m.role in ("user", "assistant")]
    if messages and messages[-1][0] == "user":
        try:
            check_answer_size(messages[-1][1], svc.settings.max_answer_chars)
        except ApiError as exc:
            return openai_error(exc.status, exc.code, exc.message)
    chat = ChatInterview(svc.engine, svc.bank)

    def exchange() -> ChatReply:
        # One transaction: the turn (and the stored reply) is committed before anything is sent.
        with svc.database.session() as db:
            return chat.exchange(db, user, body.model, messages)

    try:
        try:
            reply = await run_queued(request, user, exchange)
        except IntegrityError:
            # A twin of this request (a client retry) committed the same exchange first: this
            # one was rolled back, and now replays the stored reply.
            reply = await run_queued(request, user, exchange)
    except (ChatError, InterviewError) as exc:
        return openai_error(exc.status, exc.code, exc.message)
    except ApiError as exc:  # queue full, per-user share, storage busy
        return openai_error(exc.status, exc.code, exc.message, exc.headers)
    completion_id = (
        f"chatcmpl-{reply.session_id or 'help'}-{reply.seq if reply.seq is not None else 0}"
    )
    created = int(time.time())
    if body.stream:
        return StreamingResponse(
            _sse(completion_id, created, body.model, reply.text),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return ChatCompletion(
        id=completion_id,
        created=created,
        model=body.model,
        choices=[Choice(message=AssistantMessage(content=reply.text))],
        usage=Usage(completion_tokens=len(reply.text), total_tokens=len(reply.text)),
        sparring=SparringInfo(
            session_id=reply.session_id,
            exchange=reply.seq,
            replayed=reply.replayed,
            meta=reply.meta,
        ),
    )


def _sse(completion_id: str, created: int, model: str, text: str) -> Iterator[str]:
    """The reply as OpenAI streams it: a role chunk, content chunks, a stop chunk, [DONE]."""

    def chunk(delta: Delta, finish: Literal["stop"] | None = None) -> str:
        payload = ChatCompletionChunk(
            id=completion_id,
            created=created,
            model=model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish)],
        )
        data = payload.model_dump()
        # OpenAI sends only the delta's set fields ({} on the stop chunk), finish_reason always.
        data["choices"][0]["delta"] = delta.model_dump(exclude_none=True)
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

    yield chunk(Delta(role="assistant", content=""))
    for start in range(0, len(text), STREAM_PIECE_CHARS):
        yield chunk(Delta(content=text[start : start + STREAM_PIECE_CHARS]))
    yield chunk(Delta(), finish="stop")
    yield "data: [DONE]\n\n"
