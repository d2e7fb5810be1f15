"""OpenAI-compatible endpoints: GET /v1/models, GET /v1/models/{id}, POST /v1/chat/completions.

Any chat client (Cherry Studio, ChatBox, Open WebUI, LobeChat, the `llm` CLI, the `openai` SDK)
runs a whole mock interview through them; the conversation protocol is server/interview/chat.py,
client housekeeping (titles, tags, emoji, summaries) server/interview/client_tasks.py. The bearer
token is the API key off loopback (checked by the guard middleware before any body is read). The
turn is committed before the first byte of the reply, streamed or not.

What Sparring cannot honour is refused with a 400 that says why (n > 1, a required or named tool,
a JSON response_format for an interview turn, logprobs, audio output); `max_tokens` and `stop` are
honoured (finish_reason "length" / "stop"), and `usage` is counted with tiktoken."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from server.api import token_count
from server.api.auth import current_user
from server.api.errors import ApiError, error_body
from server.api.routes.grading import run_queued
from server.corpus.topic_names import load_topic_names
from server.interview.chat import (
    ChatError,
    ChatInterview,
    ChatModel,
    ChatReply,
    model_catalogue,
    parse_model,
)
from server.interview.engine import InterviewError
from server.services import Services

router = APIRouter(prefix="/v1", tags=["openai-compatible"])
User = Annotated[str, Depends(current_user)]
STREAM_PIECE_CHARS = 24  # how the finished reply is cut into SSE chunks
FinishReason = Literal["stop", "length"]


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


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: StrictBool | None = None


class ChatCompletionRequest(BaseModel):
    # Sampling options (temperature, top_p, seed, penalties, ...) are accepted and ignored: the
    # interviewer's lines are decided by the engine, not sampled. What would change the shape of
    # the reply is either honoured (max_tokens, stop) or refused (see check_options).
    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=200)
    messages: list[ChatMessage] = Field(min_length=1, max_length=2000)
    stream: StrictBool | None = None  # "yes", 1 or a 5000-digit number is a 400, not "true"
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, ge=1, le=128)
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    stop: str | list[str] | None = None
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=128)
    tool_choice: str | dict[str, Any] | None = None
    function_call: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: StrictBool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    modalities: list[str] | None = Field(default=None, max_length=8)


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
    finish_reason: FinishReason = "stop"


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
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]


# ---------- errors in OpenAI's shape ----------


def openai_error(
    status: int,
    code: str,
    message: str,
    param: str | None = None,
    headers: dict | None = None,
) -> JSONResponse:
    return JSONResponse(
        error_body(code, message, status, param), status_code=status, headers=headers
    )


def _param(loc: tuple) -> str | None:
    """A pydantic error location as OpenAI names the parameter: messages[0].content."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "list[TextPart]", "function-after", "literal_error"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or None


def _describe(exc: ValidationError) -> tuple[str, str | None]:
    parts = []
    errors = exc.errors()
    for err in errors:
        loc = _param(tuple(err.get("loc", ())))
        parts.append(f"{loc or 'request'}: {err.get('msg', 'invalid')}")
    first = _param(tuple(errors[0].get("loc", ()))) if errors else None
    return "; ".join(parts[:5]) or "invalid request", first


class OptionError(Exception):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param, self.message = param, message


def check_options(body: ChatCompletionRequest) -> None:
    """Refuse, with the reason, what Sparring cannot honour instead of silently ignoring it."""
    if body.n is not None and body.n != 1:
        raise OptionError(
            "n",
            f"n={body.n} is not supported: an interview has one next line per turn, so Sparring "
            "returns exactly one choice (omit n or set n=1)",
        )
    choice = body.tool_choice if body.tool_choice is not None else body.function_call
    if isinstance(choice, dict) or choice not in (None, "none", "auto"):
        name = "tool_choice" if body.tool_choice is not None else "function_call"
        raise OptionError(
            name,
            f"{name}={json.dumps(choice)} is not supported: Sparring is a mock interviewer that "
            "never calls tools, so it cannot be made to call one (use 'auto' or 'none')",
        )
    fmt = body.response_format
    if fmt is not None and fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise OptionError("response_format", f"unknown response_format type {fmt.get('type')!r}")
    if body.logprobs or body.top_logprobs:
        raise OptionError(
            "logprobs",
            "logprobs are not available: the interviewer's lines are not sampled from a model",
        )
    if body.modalities and any(m != "text" for m in body.modalities):
        raise OptionError("modalities", "only text replies are available (modalities=['text'])")
    stops = [body.stop] if isinstance(body.stop, str) else body.stop or []
    if len(stops) > 4 or any(not s for s in stops):
        raise OptionError("stop", "stop takes up to 4 non-empty strings")


def _json_body(raw: bytes) -> Any:
    """The body as JSON, or a ValueError whose text says what is wrong with it."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("the JSON body is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"the request body is not valid JSON ({exc.msg})") from None
    except (ValueError, UnicodeDecodeError) as exc:  # e.g. an integer of more than 4300 digits
        raise ValueError(f"the request body is not valid JSON ({exc})") from None


# ---------- routes ----------


def _svc(request: Request) -> Services:
    return request.app.state.services


def _created(svc: Services) -> int:
    return int(svc.settings.data_dir.stat().st_mtime) if svc.settings.data_dir.exists() else 0


def _areas(svc: Services) -> list[str]:
    return sorted({e.area.value for e in svc.bank})


@router.get("/models", response_model=ModelList)
def list_models(request: Request, user: User) -> ModelList:
    svc = _svc(request)
    created = _created(svc)
    return ModelList(
        data=[ModelCard(id=m.id, created=created) for m in model_catalogue(_areas(svc))]
    )


@router.get("/models/{model_id:path}", response_model=ModelCard)
def retrieve_model(model_id: str, request: Request, user: User):
    """Any name the chat endpoint accepts (`sparring-practice-en-grpo` too), as OpenAI's
    `client.models.retrieve(...)` expects it."""
    svc = _svc(request)
    try:
        model: ChatModel = parse_model(model_id, _areas(svc))
    except ChatError as exc:
        return openai_error(exc.status, exc.code, exc.message, exc.param)
    return ModelCard(id=model.id, created=_created(svc))


def _report_url(request: Request, svc: Services):
    base = str(request.base_url)

    def url(session_id: str, language: str) -> str:
        if svc.settings.ui_enabled:
            return f"{base}ui/?session={session_id}&lang={language}"
        return f"{base}api/sessions/{session_id}/report?format=md"

    return url


@router.post("/chat/completions", response_model=ChatCompletion)
async def chat_completions(request: Request, user: User):
    svc = _svc(request)
    try:
        raw = _json_body(await request.body())
    except ValueError as exc:
        return openai_error(400, "invalid_json", str(exc))
    if not isinstance(raw, dict):
        return openai_error(400, "invalid_request", "the request body must be a JSON object")
    try:
        body = ChatCompletionRequest.model_validate(raw)
    except (ValidationError, RecursionError) as exc:
        message, param = (
            _describe(exc) if isinstance(exc, ValidationError) else ("nested too deeply", None)
        )
        return openai_error(400, "invalid_request", message, param)
    try:
        check_options(body)
    except OptionError as exc:
        return openai_error(400, "unsupported_parameter", exc.message, exc.param)
    messages = [(m.role, m.text()) for m in body.messages]
    fmt = body.response_format if (body.response_format or {}).get("type") != "text" else None
    chat = ChatInterview(
        svc.engine,
        svc.bank,
        max_answer_chars=svc.settings.max_answer_chars,
        report_url=_report_url(request, svc),
        names=load_topic_names(svc.settings.corpus_dir),
    )

    def exchange() -> ChatReply:
        # One transaction: the turn (and the stored reply) is committed before anything is sent.
        with svc.database.session() as db:
            return chat.exchange(db, user, body.model, messages, fmt)

    try:
        try:
            reply = await run_queued(request, user, exchange)
        except IntegrityError:
            # A twin of this request (a client retry) committed the same exchange first: this
            # one was rolled back, and now replays the stored reply.
            reply = await run_queued(request, user, exchange)
    except ChatError as exc:
        return openai_error(exc.status, exc.code, exc.message, exc.param)
    except InterviewError as exc:
        return openai_error(exc.status, exc.code, exc.message)
    except ApiError as exc:  # queue full, per-user share, storage busy
        return openai_error(exc.status, exc.code, exc.message, exc.param, exc.headers)

    # Shape the reply as asked (tokenising can take a while: off the event loop).
    text, usage, finish = await run_in_threadpool(_shape, reply.text, messages, body)
    completion_id = (
        f"chatcmpl-{reply.session_id or 'help'}-{reply.seq if reply.seq is not None else 0}"
    )
    created = int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _sse(
                completion_id, created, body.model, text, finish, usage if include_usage else None
            ),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    return ChatCompletion(
        id=completion_id,
        created=created,
        model=body.model,
        choices=[Choice(message=AssistantMessage(content=text), finish_reason=finish)],
        usage=usage,
        sparring=SparringInfo(
            session_id=reply.session_id,
            exchange=reply.seq,
            replayed=reply.replayed,
            meta=reply.meta,
        ),
    )


def _shape(
    text: str, messages: list[tuple[str, str]], body: ChatCompletionRequest
) -> tuple[str, Usage, FinishReason]:
    """Apply `stop` and `max_tokens` to the reply and count the usage."""
    finish: FinishReason = "stop"
    stops = [body.stop] if isinstance(body.stop, str) else body.stop or []
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    if cuts:
        text = text[: min(cuts)]
    limits = [n for n in (body.max_tokens, body.max_completion_tokens) if n is not None]
    if limits:
        text, completion, cut = token_count.truncate(text, min(limits))
        finish = "length" if cut else finish
    else:
        completion = token_count.count(text)
    prompt = token_count.prompt_tokens(messages)
    return (
        text,
        Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion),
        finish,
    )


def _sse(
    completion_id: str,
    created: int,
    model: str,
    text: str,
    finish: FinishReason,
    usage: Usage | None,
) -> Iterator[str]:
    """The reply as OpenAI streams it: a role chunk, content chunks, a finish chunk, with
    stream_options.include_usage a last chunk with no choices and the usage, then [DONE]."""

    def event(data: dict) -> str:
        if usage is not None:
            data.setdefault("usage", None)  # OpenAI sends usage: null on every other chunk
        return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"

    def chunk(delta: Delta, finish_reason: FinishReason | None = None) -> str:
        payload = ChatCompletionChunk(
            id=completion_id,
            created=created,
            model=model,
            choices=[ChunkChoice(delta=delta, finish_reason=finish_reason)],
        )
        data = payload.model_dump()
        # OpenAI sends only the delta's set fields ({} on the finish chunk), finish_reason always.
        data["choices"][0]["delta"] = delta.model_dump(exclude_none=True)
        return event(data)

    yield chunk(Delta(role="assistant", content=""))
    for start in range(0, len(text), STREAM_PIECE_CHARS):
        yield chunk(Delta(content=text[start : start + STREAM_PIECE_CHARS]))
    yield chunk(Delta(), finish_reason=finish)
    if usage is not None:
        tail = ChatCompletionChunk(id=completion_id, created=created, model=model, choices=[])
        yield event({**tail.model_dump(), "usage": usage.model_dump()})
    yield "data: [DONE]\n\n"
