"""Chat clients' housekeeping requests: recognised, answered briefly, never part of an interview.

Chat clients send their own prompts to the chat's model besides the user's messages: Open WebUI's
title, tags, follow-ups, emoji (call mode), autocompletion, search-query, image-prompt, tool and
merge-responses tasks, LobeChat's topic title, emoji and history summary, Cherry Studio's topic
naming, ChatBox's conversation naming and compaction. Sent to Sparring, such a prompt must not start
an interview, be graded as an answer or end one. Each is recognised by the fixed wording of the
client's template (tests/test_chat_clients.py holds the real templates), in the last user message or
in a system message, and answered in the shape the client parses: JSON with the keys the template
asks for, else a short line.

Only the first and last few thousand characters of a message are read, with patterns that cannot
backtrack, so a huge message costs linear time (issue 24: one regex once froze the server)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum

HEAD_CHARS = 6000  # templates put their instructions first ...
TAIL_CHARS = 3000  # ... or, for a few, last (after the chat history they embed)


class TaskKind(StrEnum):
    title = "title"
    tags = "tags"
    follow_ups = "follow_ups"
    emoji = "emoji"
    autocomplete = "autocomplete"
    queries = "queries"
    image_prompt = "image_prompt"
    tools = "tools"
    merge = "merge"
    summary = "summary"
    search_decision = "search_decision"


# The fixed wording of each template (lower-cased, runs of blanks as one space). Gaps are bounded
# ({0,n}), so no pattern backtracks more than a few dozen characters at a position.
_SIGNATURES: list[tuple[TaskKind, str]] = [
    # Open WebUI (backend/open_webui/config.py, DEFAULT_*_PROMPT_TEMPLATE)
    (TaskKind.title, r"### ?task: ?generate a concise, 3-5 word title"),
    (TaskKind.tags, r"### ?task: ?generate 1-3 broad tags"),
    (TaskKind.follow_ups, r"suggest 3-5 relevant follow-up questions"),
    (TaskKind.autocomplete, r"you are an autocompletion system"),
    (TaskKind.queries, r"determine the necessity of generating search queries"),
    (TaskKind.image_prompt, r"generate a detailed prompt for a[nm]? image generation task"),
    (TaskKind.tools, r"choose and return the correct tool\(s\) from the list of available tools"),
    (TaskKind.emoji, r"reflect the speaker's likely facial expression through a fitting emoji"),
    (TaskKind.merge, r"you have been provided with a set of responses from various models"),
    (TaskKind.merge, r"synthesize these responses into a single, high-quality response"),
    # LobeChat (packages/prompts/src/chains: summaryTitle, pickEmoji, summaryHistory)
    (TaskKind.title, r"you are a professional conversation summarizer"),
    (TaskKind.title, r"summari[sz]e (?:the )?(?:above )?conversation into a title"),
    (TaskKind.title, r"summari[sz]e user conversations into titles"),
    (TaskKind.title, r"将用户的会话总结为"),
    (TaskKind.title, r"请总结上述对话为"),
    (TaskKind.emoji, r"\bemoji expert\b"),
    (TaskKind.emoji, r"emoji ?专家"),
    (TaskKind.emoji, r"匹配一个合适的 ?emoji"),
    (TaskKind.summary, r"good at extracting key takeaways (?:and [a-z ]{0,40})?from conversations"),
    # Cherry Studio (topic naming: "Summarize the conversation into a title in {{language}} ...")
    (TaskKind.title, r"summari[sz]e the conversation into a title in\b"),
    # ChatBox (src/renderer/packages/prompts.ts: nameConversation, summarizeConversation, search)
    (TaskKind.title, r"give this conversation a name"),
    (TaskKind.title, r"name the conversation based on the chat records"),
    (TaskKind.title, r"create a concise, informative title for the conversation"),
    (TaskKind.title, r"给这个对话起一个名字"),
    (TaskKind.summary, r"create a (?:loss-minimizing|detailed) continuity record"),
    (TaskKind.search_decision, r"you are deciding whether (?:a web search|searching the attached)"),
    (TaskKind.search_decision, r"with access to both knowledge base and web search"),
    # Any client: the common phrasings of the same jobs.
    (TaskKind.title, r"generate a (?:concise|short|brief)[^\n]{0,40}\btitle\b"),
    (TaskKind.title, r"\b(?:title|name) for (?:the|this) (?:conversation|chat)\b"),
    (TaskKind.title, r"总结[^\n]{0,20}标题"),
    (TaskKind.tags, r"### ?task: ?[^\n]{0,40}\btags\b"),
    (
        TaskKind.summary,
        r"summari[sz]e the (?:above|following|entire) (?:conversation|chat history)",
    ),
]
_PATTERNS = [(kind, re.compile(p)) for kind, p in _SIGNATURES]
_OPEN_WEBUI_TASK = re.compile(r"^### ?task:")
_BLANKS = re.compile(r"\s+")
# A JSON output the template spells out: `{ "title": ...`, `"follow_ups": [...]`.
_JSON_KEY = re.compile(r"\{ ?\"([a-z_]{1,30})\" ?:")
_WANTS_JSON = re.compile(r"\bjson\b")


@dataclass(frozen=True)
class ClientTask:
    kind: TaskKind
    json_key: str | None  # the reply is a JSON object with this key (None: plain text)


def _window(text: str) -> str:
    """What the recogniser reads: a message's head and tail, lower-cased, whitespace folded."""
    if len(text) > HEAD_CHARS + TAIL_CHARS:
        text = text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]
    return _BLANKS.sub(" ", text.lower())


def _kind_of(window: str) -> TaskKind | None:
    for kind, pattern in _PATTERNS:
        if pattern.search(window):
            return kind
    if _OPEN_WEBUI_TASK.match(window.lstrip()):
        return TaskKind.title  # an Open WebUI task we do not know yet: answered like a title
    return None


def recognise(messages: list[tuple[str, str]]) -> ClientTask | None:
    """The housekeeping task these messages are, or None for an interview message.

    Read: the last user message (a task appended after a live history is still a task) and the
    system messages (LobeChat and Cherry Studio put the instruction there and the chat history in
    the user message)."""
    last_user = next((t for r, t in reversed(messages) if r == "user"), None)
    if last_user is None:
        return None
    candidates = [last_user] + [t for r, t in messages if r in ("system", "developer")]
    for text in candidates:
        window = _window(text)
        kind = _kind_of(window)
        if kind is None:
            continue
        key = None
        # Open WebUI parses every task reply as JSON; others say so in the template.
        if _WANTS_JSON.search(window) or _OPEN_WEBUI_TASK.match(window.lstrip()):
            found = _JSON_KEY.search(window)
            key = found.group(1) if found else _DEFAULT_KEYS.get(kind)
        return ClientTask(kind, key)
    return None


_DEFAULT_KEYS = {
    TaskKind.title: "title",
    TaskKind.tags: "tags",
    TaskKind.follow_ups: "follow_ups",
    TaskKind.queries: "queries",
    TaskKind.autocomplete: "text",
    TaskKind.image_prompt: "prompt",
    TaskKind.tools: "tool_calls",
    TaskKind.emoji: "emoji",
    TaskKind.summary: "summary",
    TaskKind.search_decision: "action",
}

EMOJI = "🎯"
MERGE_REPLY = {
    "zh": "Sparring 每个对话只进行一场面试，不合并多个回复；请在原对话里继续回答。",
    "en": "Sparring runs one interview per chat and does not merge replies; "
    "continue answering in the chat.",
}


@dataclass(frozen=True)
class TaskContext:
    """What a reply may say: the interview's title and tags, and the latest marker line."""

    title: str
    tags: list[str]
    language: str
    marker: str | None = None  # kept in a summary, so a compacted chat still finds its session


def _value(key: str, task: ClientTask, ctx: TaskContext) -> object:
    lists = ("follow_ups", "queries", "tool_calls", "suggestions", "keywords")
    if key in lists:
        return []
    if key == "tags":
        return ctx.tags
    if key in ("title", "name"):
        return ctx.title
    if key == "emoji":
        return EMOJI
    if key == "action":
        return "proceed"
    if key in ("summary", "description"):
        return _summary(ctx)
    if task.kind == TaskKind.title:
        return ctx.title
    return ""


def _summary(ctx: TaskContext) -> str:
    head = (
        f"A Sparring mock interview ({ctx.title}); it goes on in this chat."
        if ctx.language == "en"
        else f"一场 Sparring 模拟面试（{ctx.title}），在本对话中继续进行。"
    )
    return f"{head}\n{ctx.marker}" if ctx.marker else head


def reply_text(task: ClientTask, ctx: TaskContext, schema: dict | None = None) -> str:
    """The reply: JSON when the template (or `response_format`) asks for it, else a short line."""
    if task.kind == TaskKind.search_decision:  # ChatBox: {"action": "proceed"} = no search
        return json.dumps({"action": "proceed"})
    if schema is not None:
        return json.dumps(fill_schema(schema, task, ctx), ensure_ascii=False)
    if task.json_key is not None:
        return json.dumps({task.json_key: _value(task.json_key, task, ctx)}, ensure_ascii=False)
    if task.kind == TaskKind.emoji:
        return EMOJI
    if task.kind == TaskKind.merge:
        return MERGE_REPLY["en" if ctx.language == "en" else "zh"]
    if task.kind == TaskKind.summary:
        return _summary(ctx)
    if task.kind == TaskKind.tags:
        return ", ".join(ctx.tags)
    if task.kind in (TaskKind.follow_ups, TaskKind.queries, TaskKind.autocomplete):
        return ""
    return ctx.title


def fill_schema(schema: dict, task: ClientTask, ctx: TaskContext) -> dict:
    """An object for a `response_format` json_schema: each property gets our value for that key
    (title, tags, emoji, ...), or an empty value of its type."""
    body = schema.get("schema", schema) if isinstance(schema, dict) else {}
    props = body.get("properties") if isinstance(body, dict) else None
    if not isinstance(props, dict):
        return {task.json_key or _DEFAULT_KEYS.get(task.kind, "text"): ctx.title}
    out: dict[str, object] = {}
    for key, spec in list(props.items())[:50]:
        value = _value(str(key), task, ctx)
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind == "array" and not isinstance(value, list):
            value = []
        elif kind == "string" and not isinstance(value, str):
            value = ""
        elif kind in ("number", "integer"):
            value = 0
        elif kind == "boolean":
            value = False
        elif kind == "object":
            value = {}
        out[str(key)] = value
    return out
