"""A thin typed wrapper over Sparring's HTTP API, shared by the Gradio UI and the terminal client.

It holds no interview logic: every decision is the server's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx


def seconds_left(deadline: str) -> float:
    """Seconds until a deadline as the server sends it (ISO 8601); negative once it has passed."""
    return (
        datetime.fromisoformat(deadline.replace("Z", "+00:00")) - datetime.now(UTC)
    ).total_seconds()


def mm_ss(seconds: float) -> str:
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


class ApiError(Exception):
    """An error the server answered with ({"error": {"code", "message"}}), or a transport failure."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def __str__(self) -> str:
        return f"{self.message} ({self.code}, HTTP {self.status})" if self.status else self.message


class SparringClient:
    def __init__(self, base_url: str, token: str = "", timeout: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            r = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(
                0, "unreachable", f"cannot reach the Sparring server at {self.base_url}: {exc}"
            ) from exc
        if r.status_code >= 400:
            try:
                err = r.json()["error"]
                raise ApiError(r.status_code, err.get("code", "error"), err.get("message", r.text))
            except (ValueError, KeyError, TypeError):
                raise ApiError(r.status_code, "error", r.text[:300]) from None
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        return r.text

    def health(self) -> dict:
        return self._call("GET", "/healthz")

    def questions(self, **params: Any) -> dict:
        return self._call("GET", "/api/questions", params={k: v for k, v in params.items() if v})

    def start(self, **body: Any) -> dict:
        return self._call("POST", "/api/sessions", json=body)

    def answer(self, session_id: str, text: str) -> dict:
        return self._call("POST", f"/api/sessions/{session_id}/answers", json={"answer": text})

    def answer_audio(self, session_id: str, name: str, audio: bytes, content_type: str) -> dict:
        """A spoken answer: the server transcribes it and answers with the transcript."""
        return self._call(
            "POST",
            f"/api/sessions/{session_id}/answers/audio",
            files={"file": (name, audio, content_type)},
        )

    def hint(self, session_id: str) -> dict:
        return self._call("POST", f"/api/sessions/{session_id}/hint")

    def clarify(self, session_id: str, question: str) -> dict:
        """A question about the question: answered by the interviewer, not graded."""
        return self._call(
            "POST", f"/api/sessions/{session_id}/clarify", json={"question": question}
        )

    def skip(self, session_id: str) -> dict:
        return self._call("POST", f"/api/sessions/{session_id}/skip")

    def followup(self, session_id: str) -> dict:
        return self._call("POST", f"/api/sessions/{session_id}/followup")

    def end(self, session_id: str) -> dict:
        return self._call("POST", f"/api/sessions/{session_id}/end")

    def state(self, session_id: str) -> dict:
        return self._call("GET", f"/api/sessions/{session_id}")

    def report(self, session_id: str) -> dict:
        return self._call("GET", f"/api/sessions/{session_id}/report")

    def report_markdown(self, session_id: str, lang: str = "en") -> str:
        return self._call(
            "GET", f"/api/sessions/{session_id}/report", params={"format": "md", "lang": lang}
        )

    def search(self, query: str, k: int = 5) -> dict:
        return self._call("GET", "/api/questions/search", params={"q": query, "k": k})

    def filter_options(self, companies: list[str] | None = None) -> dict:
        """Areas and topics with question counts for the chosen companies (all when none)."""
        return self._call("GET", "/api/topics", params={"company": companies or []})

    def progress(self) -> dict:
        return self._call("GET", "/api/progress")

    def server_info(self) -> dict:
        return self._call("GET", "/api/info")
