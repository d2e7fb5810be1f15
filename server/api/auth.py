"""Bearer-token users. Without configured tokens (loopback default) everyone is the local user."""

from __future__ import annotations

import hmac

from fastapi import Request

from server.api.errors import ApiError

LOCAL_USER = "local"


def parse_tokens(raw: str) -> dict[str, str]:
    tokens = {}
    for pair in raw.split(","):
        pair = pair.strip()
        if not pair:
            continue
        token, _, user = pair.partition(":")
        tokens[token.strip()] = (user or token).strip()
    return tokens


def current_user(request: Request) -> str:
    tokens: dict[str, str] = request.app.state.tokens
    if not tokens:
        return LOCAL_USER
    header = request.headers.get("authorization", "")
    scheme, _, supplied = header.partition(" ")
    if scheme.lower() == "bearer":
        for token, user in tokens.items():
            if hmac.compare_digest(token, supplied.strip()):
                return user
    raise ApiError(
        401, "unauthorized", "a valid 'Authorization: Bearer <token>' header is required"
    )
