"""Grade one answer with the rubric grader over HTTP, as the coding tests do."""

from __future__ import annotations

import httpx


def grade(client: httpx.Client, qid: str, answer: str, language: str = "zh") -> dict:
    r = client.post(
        "/api/grade",
        json={"question_id": qid, "answer": answer, "grader": "rubric", "language": language},
    )
    assert r.status_code == 200, r.text
    return r.json()
