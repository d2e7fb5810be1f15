"""A scripted OpenAI-compatible chat-completions server on loopback, for testing the LLM path for real."""

from __future__ import annotations

import email.policy
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedLLM:
    """Each request pops the next step:
    ("reply", text) | ("slow", seconds, text) | ("status", code)
    | ("trickle", seconds_per_byte, text): headers at once, then the body one byte at a time
    | ("quote", n): every rubric key point "covered", its evidence the answer's first n characters
    | ("obey", feedback): every key point "covered" with a real sentence of the answer (a model that
      followed an injected instruction), plus the given feedback
    | ("compute", fn): the reply text is fn(request body)
    | ("budget", text): honours the request's max_tokens like a model server: the text is cut at
      that many tokens (scripted_tokens) with finish_reason "length"; without max_tokens, all of it
    | POST .../audio/transcriptions (multipart): ("transcript", text) | ("slow", seconds, text)
      | ("status", code); the form (model, language, filename, file_type, audio bytes) is recorded
    | ("context", n_tokens, text): a model with an n-token context: a prompt whose scripted_tokens
      plus max_tokens exceed it gets llama.cpp's 400 error, else the text (or fn(request body)).

    | ("sse", seconds_per_chunk, text): a streamed reply (server-sent events, chunks of 8
      characters, one every seconds_per_chunk), for a client that asked for stream=true

    serial=True serves one request at a time, like a single-slot llama.cpp server: a request the
    client abandoned blocks the next one until its connection is seen closed. `dropped` counts
    replies whose connection the client closed before they were complete."""

    def __init__(self, serial: bool = False) -> None:
        self.steps: deque[tuple[Any, ...]] = deque()
        self.requests: list[dict] = []
        self.dropped = 0
        self._slot = threading.Lock() if serial else None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *steps: tuple[Any, ...]) -> None:
        self.steps.clear()
        self.steps.extend(steps)
        self.requests.clear()

    def __enter__(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                if self.path.rstrip("/").endswith("/audio/transcriptions"):
                    self._transcribe(self.rfile.read(length))
                    return
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.requests.append(body)
                step = outer.steps.popleft() if outer.steps else ("status", 500)
                if outer._slot is None:
                    self._serve(step, body)
                    return
                with outer._slot:
                    self._serve(step, body)

            def _serve(self, step: tuple[Any, ...], body: dict) -> None:
                if step[0] == "status":
                    self._send(step[1], {"error": {"message": "scripted failure"}})
                    return
                model = body.get("model", "scripted")
                if step[0] == "trickle":
                    self._trickle(step[1], completion(step[2], model))
                    return
                if step[0] == "sse":
                    self._sse(step[1], step[2], model)
                    return
                if step[0] == "slow":
                    time.sleep(step[1])
                    text = step[2]
                elif step[0] == "quote":
                    text = quoting_reply(body, lambda answer, _: answer[: step[1]])
                elif step[0] == "obey":
                    text = quoting_reply(body, lambda answer, i: sentences(answer)[i % 3])
                    text = json.dumps({**json.loads(text), "feedback": step[1]})
                elif step[0] == "compute":
                    text = step[1](body)
                elif step[0] == "budget":
                    limit = body.get("max_tokens")
                    if limit is not None and scripted_tokens(step[1]) > limit:
                        self._send(200, completion(cut_to_tokens(step[1], limit), model, "length"))
                        return
                    text = step[1]
                elif step[0] == "context":
                    prompt = sum(scripted_tokens(str(m.get("content"))) for m in body["messages"])
                    if prompt + int(body.get("max_tokens") or 0) > step[1]:
                        message = (
                            f"the request exceeds the available context size ({prompt} prompt "
                            f"tokens + {body.get('max_tokens')} to generate > {step[1]})"
                        )
                        self._send(
                            400, {"error": {"message": message, "type": "invalid_request_error"}}
                        )
                        return
                    text = step[2](body) if callable(step[2]) else step[2]
                else:
                    text = step[1]
                self._send(200, completion(text, model))

            def _transcribe(self, raw: bytes) -> None:
                """The speech endpoint: records the multipart form, answers the next step."""
                form = multipart_form(self.headers.get("content-type", ""), raw)
                outer.requests.append({"path": self.path, **form})
                step = outer.steps.popleft() if outer.steps else ("status", 500)
                if step[0] == "status":
                    self._send(step[1], {"error": {"message": "scripted failure"}})
                    return
                if step[0] == "slow":
                    time.sleep(step[1])
                self._send(200, {"text": step[-1]})

            def _trickle(self, seconds_per_byte: float, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    for i in range(len(data)):
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                        time.sleep(seconds_per_byte)
                except (BrokenPipeError, ConnectionResetError):
                    outer.dropped += 1  # the grader gave up: what the deadline is for

            def _sse(self, seconds_per_chunk: float, text: str, model: str) -> None:
                pieces = [text[i : i + 8] for i in range(0, len(text), 8)]
                try:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for n, piece in enumerate(pieces):
                        last = n == len(pieces) - 1
                        event = stream_chunk(piece, model, "stop" if last else None)
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(0 if last else seconds_per_chunk)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    outer.dropped += 1
                self.close_connection = True

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    outer.dropped += 1  # the client gave up (timeout test)

        return Handler


def multipart_form(content_type: str, raw: bytes) -> dict:
    """A multipart/form-data body as {field: text} plus the uploaded file's name, type and bytes."""
    message = BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    form: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        if part.get_filename():
            form.update(
                filename=part.get_filename(),
                file_type=part.get_content_type(),
                audio=data,
            )
        elif name:
            form[str(name)] = data.decode("utf-8", "replace")
    return form


def prompt_parts(body: dict) -> tuple[list[str], str]:
    """The key point ids and the candidate answer from the grader's user message."""
    user = body["messages"][-1]["content"]
    points = user.split("Rubric key points:", 1)[1].split("Known misconceptions:", 1)[0]
    ids = re.findall(r"^- ([\w-]+):", points, re.MULTILINE)
    answer = user.split("<candidate_answer>\n", 1)[1].rsplit("\n</candidate_answer>", 1)[0]
    return ids, answer


def sentences(answer: str) -> list[str]:
    parts = [p.strip() for p in re.split(r"(?<=[。.!?！？])", answer) if p.strip()]
    return (parts * 3)[:3] if parts else [answer] * 3


def quoting_reply(body: dict, quote: Callable[[str, int], str]) -> str:
    ids, answer = prompt_parts(body)
    points = [{"id": kp, "covered": True, "evidence": quote(answer, i)} for i, kp in enumerate(ids)]
    return json.dumps(
        {"key_points": points, "misconceptions": [], "feedback": "全部覆盖。"}, ensure_ascii=False
    )


_CJK = re.compile(r"[\u2e80-\u9fff\uff00-\uffef]")


def scripted_tokens(text: str) -> int:
    """A model server's token count, roughly a BPE tokenizer's: a CJK character one token, other
    text four characters a token."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk + 3) // 4


def cut_to_tokens(text: str, tokens: int) -> str:
    out = ""
    for ch in text:
        if scripted_tokens(out + ch) > tokens:
            break
        out += ch
    return out


def stream_chunk(text: str, model: str, finish_reason: str | None) -> dict:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish_reason}],
    }


def completion(text: str, model: str, finish_reason: str = "stop") -> dict:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }
