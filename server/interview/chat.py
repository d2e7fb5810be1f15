"""A mock interview as a chat transcript: what the OpenAI-compatible endpoint runs.

The first user message starts a session (mode, language, topics, companies, length are read from
it and from the model name); every later user message is an answer or a command. Each reply ends
with a marker line naming the session and the exchange number; a client that resends the whole
history (or only its last few messages) is mapped back to its session through the latest marker,
and an exchange already answered is replayed from storage, never graded twice."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.corpus.bank import QuestionBank
from server.corpus.topic_names import TopicNames
from server.grading.models import Grade
from server.interview.clarify import is_clarifying_question
from server.interview.client_tasks import ClientTask, TaskContext, recognise, reply_text
from server.interview.engine import InterviewEngine, InterviewError
from server.interview.report import build_report
from server.interview.schemas import AnswerResponse, Mode, NextStep, SessionRequest
from server.storage.models import ChatExchange, InterviewSession, aware

MODEL_PREFIX = "sparring"
# Possessive quantifiers (++, {m,n}+) never give characters back, so no pattern here can backtrack
# into quadratic time on runs of blanks or digits (issue 24: `seed` + 24,000 spaces froze the server).
MARKER_RE = re.compile(r"\[sparring session=([0-9a-f]{32}) turn=(\d++)[^\]\[\n]{0,80}+\]")
MAX_TURN = 1_000_000  # far above any interview; a larger turn in a marker is not ours
MARKER_SCAN_CHARS = 4000  # the marker is the last line of a reply: read only a reply's tail
OPENING_SCAN_CHARS = 4000  # settings are read from the start of the opening message
COMMANDS = ("/hint", "/skip", "/followup", "/end", "/help", "/ask")
QUESTION_CHARS = 60  # a question's text in the end-of-interview list
_EN_WORDS_RE = re.compile(r"\b(english|in english)\b|英文|英语", re.IGNORECASE)
_ZH_WORDS_RE = re.compile(r"\bchinese\b|中文", re.IGNORECASE)
_PRACTICE_RE = re.compile(r"\bpractice\b|\buntimed\b|练习|不计时", re.IGNORECASE)
_COUNT_RE = re.compile(r"(\d{1,2})\s{0,3}+(?:道题|道|题|个问题|questions?)", re.IGNORECASE)
_MINUTES_RE = re.compile(r"(\d{1,3})\s{0,3}+(?:分钟|mins?\b|minutes?)", re.IGNORECASE)
_SEED_RE = re.compile(r"\bseed\s{0,3}+(?:[=:]\s{0,3}+)?(\d{1,9})\b", re.IGNORECASE)
_GRADER_RE = re.compile(r"\bgrader\s{0,3}+[=:]\s{0,3}+(rubric|llm|auto)\b", re.IGNORECASE)
_CJK_RE = re.compile(r"[\u3400-\u9fff]")
_LATIN_WORD_RE = re.compile(r"[A-Za-z]{3}")


class ChatError(Exception):
    """A request the chat protocol cannot serve; `status` and `code` go to the client as is."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


@dataclass(frozen=True)
class ChatModel:
    """A model name of /v1/models and the session defaults it stands for."""

    id: str
    mode: Mode = Mode.interview
    language: str | None = None
    area: str | None = None


def model_catalogue(areas: list[str]) -> list[ChatModel]:
    models = []
    for mode in (Mode.interview, Mode.practice):
        for lang in (None, "en"):
            suffix = f"-{lang}" if lang else ""
            models.append(ChatModel(f"{MODEL_PREFIX}-{mode.value}{suffix}", mode, lang))
    models += [
        ChatModel(f"{MODEL_PREFIX}-interview-{area}", Mode.interview, None, area) for area in areas
    ]
    return models


def parse_model(name: str, areas: list[str]) -> ChatModel:
    """`sparring-<interview|practice>[-zh|-en][-<area>]` in any order after the mode; plain
    `sparring` is a timed interview. Anything else is not one of our models."""
    parts = name.strip().lower().split("-")
    if not parts or parts[0] != MODEL_PREFIX:
        raise ChatError(
            404,
            "model_not_found",
            f"unknown model {name!r}; GET /v1/models lists the models",
            "model",
        )
    mode, language, area = Mode.interview, None, None
    for part in parts[1:]:
        if part in (Mode.interview.value, Mode.practice.value):
            mode = Mode(part)
        elif part in ("zh", "en"):
            language = part
        elif part in areas:
            area = part
        else:
            raise ChatError(
                404,
                "model_not_found",
                f"unknown model {name!r}; GET /v1/models lists the models",
                "model",
            )
    return ChatModel(name, mode, language, area)


def session_request(model: ChatModel, text: str, bank: QuestionBank) -> SessionRequest:
    """Session settings from the opening message; the model name gives the defaults.

    Only the start of the message is read: settings come first, and no pattern then runs on more
    than a few thousand characters."""
    text = text[:OPENING_SCAN_CHARS]
    language = model.language
    if _EN_WORDS_RE.search(text):
        language = "en"
    elif _ZH_WORDS_RE.search(text):
        language = "zh"
    elif language is None:
        has_cjk = _CJK_RE.search(text) is not None
        language = "en" if not has_cjk and _LATIN_WORD_RE.search(text) else "zh"
    mode = Mode.practice if _PRACTICE_RE.search(text) else model.mode
    topics = mentioned_topics(text, bank)
    if model.area:
        topics.add(model.area)
    # Companies match by prefix ("字节" covers 字节跳动 and 字节Seed), as session filters do.
    companies = sorted({c[:2] for e in bank for c in e.companies if c[:2] in text})
    values: dict = {
        "mode": mode,
        "language": language,
        "topics": sorted(topics),
        "companies": companies,
    }
    if count := _COUNT_RE.search(text):
        values["num_questions"] = max(1, min(50, int(count.group(1))))
    if minutes := _MINUTES_RE.search(text):
        values["duration_minutes"] = max(1, min(240, int(minutes.group(1))))
    if seed := _SEED_RE.search(text):
        values["seed"] = int(seed.group(1))
    if grader := _GRADER_RE.search(text):
        values["grader"] = grader.group(1).lower()
    return SessionRequest(**values)


def area_pattern(area: str) -> re.Pattern[str]:
    """An area name as a word of its own ("ppo" is not inside "grpo")."""
    return re.compile(rf"(?<![a-z]){re.escape(area)}(?![a-z])")


def mentioned_topics(text: str, bank: QuestionBank) -> set[str]:
    """The areas and topics of the bank that `text` names; the most specific spelling wins."""
    lowered = text[:OPENING_SCAN_CHARS].lower()
    areas = {e.area.value for e in bank}
    topics = {a for a in areas if area_pattern(a).search(lowered)}
    topics |= {e.topic for e in bank if len(e.topic) >= 3 and e.topic.lower() in lowered}
    # One name per spelling (an area wins over a topic of the same name), and the most specific
    # match wins: "GRPO优势基线" asks for that topic, not all of grpo.
    by_lower: dict[str, str] = {}
    for t in sorted(topics, key=lambda t: (t not in areas, t)):
        by_lower.setdefault(t.lower(), t)
    return {
        t
        for low, t in by_lower.items()
        if not any(low in other and low != other for other in by_lower)
    }


def marker(session_id: str, seq: int, remaining: float | None, language: str) -> str:
    clock = ""
    if remaining is not None:
        minutes, seconds = divmod(int(remaining), 60)
        clock = f" · {'left' if language == 'en' else '剩余'} {minutes}:{seconds:02d}"
    return f"[sparring session={session_id} turn={seq}{clock}]"


def parse_turn(digits: str) -> int:
    """A marker's turn number; a 4xx (never a 500) for one no interview reaches."""
    if len(digits) > len(str(MAX_TURN)) or int(digits) > MAX_TURN:
        raise ChatError(
            400,
            "invalid_marker",
            f"the session marker's turn number is out of range (at most {MAX_TURN}); "
            "keep Sparring's marker lines as they were sent",
            "messages",
        )
    return int(digits)


def last_marker(text: str) -> tuple[str, int] | None:
    """(session id, turn) of the last marker in the tail of `text`."""
    found = MARKER_RE.findall(text[-MARKER_SCAN_CHARS:])
    if not found and "[sparring session=" in text:
        found = MARKER_RE.findall(text)  # one longer than the tail (a forged turn): still linear
    if not found:
        return None
    sid, seq = found[-1]
    return sid, parse_turn(seq)


def find_marker(messages: list[tuple[str, str]]) -> tuple[str, int, int] | None:
    """(session id, exchange number, index of that assistant message) of the latest marker."""
    for index in range(len(messages) - 1, -1, -1):
        role, text = messages[index]
        if role == "assistant":
            found = last_marker(text)
            if found:
                return found[0], found[1], index
    return None


def shorten(text: str, limit: int = QUESTION_CHARS) -> str:
    """`text` on one line, at most `limit` characters, cut at a word boundary with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    # Mid-word (a Latin letter or digit on both sides of the cut): back to the last space, unless
    # that loses more than half; CJK text has no spaces and every character is a word.
    if cut[-1].isascii() and cut[-1].isalnum() and text[limit].isascii() and text[limit].isalnum():
        space = cut.rfind(" ")
        if space > limit // 2:
            cut = cut[:space]
    return cut.rstrip(" ,.;:，。；：、-—") + "…"


@dataclass
class ChatReply:
    text: str
    session_id: str | None
    seq: int | None
    replayed: bool = False
    meta: dict = field(default_factory=dict)


EDITED_BRANCH_ADVICE = (
    "Go back to the original branch (the latest reply, with the newest [sparring ...] line) to "
    "continue this interview, or start a new chat for a new interview."
)
EDITED_BRANCH = (
    "This chat branch was edited or regenerated from an earlier message, but the interview has "
    "moved on: an answer already given cannot be changed. " + EDITED_BRANCH_ADVICE
)
_DEFAULT_KEY_FOR_JSON = "text"
TASK_SCAN_CHARS = 200_000  # how much of a housekeeping request is searched for a marker


HELP = {
    "zh": (
        "可用命令：/hint 要一个提示（该题得分上限降低），/skip 跳过本题，/followup 换一道相关追问题，"
        "/end 结束面试并查看报告，/ask <问题> 向面试官澄清题意（计时继续）。其他消息都当作回答。"
    ),
    "en": (
        "Commands: /hint for a hint (lowers this question's score cap), /skip to skip, /followup for "
        "a related question now, /end to finish and see the report, /ask <question> to ask the "
        "interviewer what the question means (the clock keeps running). Anything else is an answer."
    ),
}


def default_report_url(session_id: str, language: str) -> str:
    return f"/api/sessions/{session_id}/report?format=md"


class ChatInterview:
    """Runs one chat exchange on the engine; the caller commits `db` before replying."""

    def __init__(
        self,
        engine: InterviewEngine,
        bank: QuestionBank,
        max_answer_chars: int = 8000,
        report_url: Callable[[str, str], str] = default_report_url,
        names: TopicNames | None = None,
    ) -> None:
        self.engine = engine
        self.bank = bank
        self.areas = sorted({e.area.value for e in bank})
        self.max_answer_chars = max_answer_chars
        self.report_url = report_url  # (session id, language) -> where a chat user opens the report
        self.names = names

    def exchange(
        self,
        db: Session,
        user: str,
        model_name: str,
        messages: list[tuple[str, str]],
        response_format: dict | None = None,
    ) -> ChatReply:
        """`messages` are every message's (role, text), system ones included, in request order."""
        model = parse_model(model_name, self.areas)
        dialogue = [(i, r, t) for i, (r, t) in enumerate(messages) if r in ("user", "assistant")]
        if not dialogue or dialogue[-1][1] != "user" or not dialogue[-1][2].strip():
            raise ChatError(
                400,
                "invalid_request",
                "the last message must be a non-empty user message",
                "messages",
            )
        task = recognise(messages)
        if task is not None:  # with or without a history: never starts, answers or ends anything
            return self._client_task(db, user, task, messages, response_format)
        if response_format is not None:
            raise ChatError(
                400,
                "unsupported_response_format",
                f"response_format {response_format.get('type')!r} is not supported: the "
                "interviewer replies in plain text, so a JSON reply cannot be promised",
                "response_format",
            )
        for index, role, text in dialogue:
            if role == "user":
                self._check_size(text, f"messages[{index}].content")
        pairs = [(r, t) for _, r, t in dialogue]
        found = find_marker(pairs)
        if found is None:
            first = next(text for role, text in pairs if role == "user")
            if first.strip().lower() == "/help":
                return ChatReply(HELP["zh"] + "\n\n" + HELP["en"], None, None)
            return self._start(db, user, model, first)
        session_id, seq, index = found
        new = [text.strip() for role, text in pairs[index + 1 :] if role == "user"]
        text = "\n".join(t for t in new if t)
        self._check_size(text, "messages")  # the user messages since the marker, joined
        return self._continue(db, user, session_id, seq + 1, text)

    def _check_size(self, text: str, param: str) -> None:
        if len(text) > self.max_answer_chars:
            raise ChatError(
                413,
                "answer_too_long",
                f"the message has {len(text)} characters; the limit is {self.max_answer_chars} "
                "(SPARRING_MAX_ANSWER_CHARS); nothing was recorded",
                param,
            )

    # ---------- client housekeeping (titles, tags, emoji, summaries, ...) ----------

    def _client_task(
        self,
        db: Session,
        user: str,
        task: ClientTask,
        messages: list[tuple[str, str]],
        response_format: dict | None,
    ) -> ChatReply:
        schema = None
        if response_format is not None and response_format.get("type") == "json_schema":
            schema = response_format.get("json_schema") or {}
        elif response_format is not None and task.json_key is None:
            task = ClientTask(task.kind, _DEFAULT_KEY_FOR_JSON)
        ctx = self._task_context(db, user, messages)
        meta = {"kind": "client_task", "task": task.kind.value}
        return ChatReply(reply_text(task, ctx, schema), None, None, meta=meta)

    def _task_context(self, db: Session, user: str, messages: list[tuple[str, str]]) -> TaskContext:
        """The interview a housekeeping request is about: found by the latest marker, in the
        messages or inside the history a template embeds; else guessed from the text."""
        found = None
        for _, text in reversed(messages):
            hits = MARKER_RE.findall(text[:TASK_SCAN_CHARS])
            if hits:
                sid, digits = hits[-1]
                if len(digits) <= len(str(MAX_TURN)) and int(digits) <= MAX_TURN:
                    found = (sid, int(digits))
                break
        session = None
        if found is not None:
            row = db.get(InterviewSession, found[0])
            session = row if row is not None and row.user == user else None
        text = "\n".join(t for _, t in messages)[:TASK_SCAN_CHARS]
        if session is not None:
            language = session.language
            topics = list(SessionRequest(**session.filters).topics)
            if not topics and session.questions:
                entry = self.bank.get(session.questions[0].entry_id)
                topics = [entry.area.value] if entry is not None else []
            day = aware(session.created_at) or datetime.now(UTC)
            mark = marker(session.id, found[1], None, language) if found else None
        else:
            language = "zh" if _CJK_RE.search(text) else "en"
            topics = sorted(mentioned_topics(text, self.bank))
            day = datetime.now(UTC)
            mark = None
        shown = [self._topic_name(t, language) for t in topics[:3]]
        if language == "en":
            title = f"{' · '.join(shown) or 'Sparring'} mock interview {day:%Y-%m-%d}"
            tags = ["Interview", *shown]
        else:
            title = f"{' · '.join(shown) or 'Sparring'} 模拟面试 {day:%Y-%m-%d}"
            tags = ["面试", *shown]
        return TaskContext(title, tags, language, mark)

    def _topic_name(self, topic: str, language: str) -> str:
        if self.names is None:
            return topic
        if topic in self.areas:
            return self.names.area(topic, language)
        return self.names.topic(topic, language)

    # ---------- steps ----------

    def _start(self, db: Session, user: str, model: ChatModel, text: str) -> ChatReply:
        request = session_request(model, text, self.bank)
        created = self.engine.start(db, user, request)
        session = self.engine.load(db, user, created.id)
        lang = request.language
        intro = (
            f"Mode: {request.mode.value}, {session.num_questions} "
            f"question{'s' if session.num_questions != 1 else ''}"
            if lang == "en"
            else f"模式：{'计时面试' if request.mode == Mode.interview else '练习'}，"
            f"共 {session.num_questions} 题"
        )
        if created.deadline is not None:
            intro += (
                f", {request.duration_minutes} minutes"
                if lang == "en"
                else f"，限时 {request.duration_minutes} 分钟"
            )
        if request.topics:
            names = self.engine.phrasing.topic_names
            intro += (" · topics: " if lang == "en" else " · 方向：") + ", ".join(
                names.topic(t, lang) for t in request.topics
            )
        if request.companies:
            intro += (" · companies: " if lang == "en" else " · 公司：") + ", ".join(
                request.companies
            )
        body = f"{intro}\n{HELP[lang]}\n\n{created.question.prompt}"
        return self._store(db, session, 0, text, body, {"kind": "start"})

    def _continue(self, db: Session, user: str, session_id: str, seq: int, text: str) -> ChatReply:
        session = self.engine.load(db, user, session_id)
        done = db.scalar(
            select(ChatExchange).where(
                ChatExchange.session_id == session_id, ChatExchange.seq == seq
            )
        )
        if done is not None:
            if done.user_text.strip() != text:
                raise ChatError(409, "conflict", EDITED_BRANCH, "messages")
            return ChatReply(done.reply, session_id, seq, replayed=True, meta=done.meta)
        latest = db.scalar(
            select(ChatExchange.seq)
            .where(ChatExchange.session_id == session_id)
            .order_by(ChatExchange.seq.desc())
            .limit(1)
        )
        if latest is not None and seq != latest + 1:
            raise ChatError(
                409,
                "conflict",
                f"this message answers exchange {seq - 1}, but the interview is at exchange "
                f"{latest}. {EDITED_BRANCH_ADVICE}",
                "messages",
            )
        if not text:
            raise ChatError(400, "invalid_request", "the last user message is empty")
        body, meta = self._act(db, user, session, text)
        return self._store(db, session, seq, text, body, meta)

    def _act(
        self, db: Session, user: str, session: InterviewSession, text: str
    ) -> tuple[str, dict]:
        lang = session.language
        sid = session.id
        if session.status == "ended":
            return self._ended_text(session), {"kind": "ended"}
        command, _, rest = text.partition(" ")
        command = command.lower()
        try:
            if command == "/help":
                return HELP[lang], {"kind": "help"}
            if command == "/hint":
                hint = self.engine.hint(db, user, sid)
                cap = (
                    f"(score cap {hint.score_cap:g})"
                    if lang == "en"
                    else f"（本题得分上限 {hint.score_cap:g}）"
                )
                return f"{hint.hint} {cap}", {"kind": "hint"}
            if command == "/skip":
                skipped = self.engine.skip(db, user, sid)
                return self._after_answer(session, skipped), {
                    "kind": "skip",
                    "next": skipped.next.kind,
                    "phrasing": skipped.next.phrasing.model_dump(),
                }
            if command == "/followup":
                step = self.engine.followup(db, user, sid)
                return self._next_text(session, step), {
                    "kind": "followup",
                    "phrasing": step.phrasing.model_dump(),
                }
            if command == "/end":
                self.engine.end(db, user, sid)
                return self._ended_text(session), {"kind": "end"}
            if command == "/ask" or is_clarifying_question(text):
                question = rest if command == "/ask" else text
                reply = self.engine.clarify(db, user, sid, question or text)
                return reply.text, {"kind": "clarify", "phrasing": reply.phrasing.model_dump()}
            if command.startswith("/") and command not in COMMANDS:
                return (
                    f"Unknown command {command}. {HELP[lang]}"
                    if lang == "en"
                    else f"未知命令 {command}。{HELP[lang]}"
                ), {"kind": "help"}
            result = self.engine.answer(db, user, sid, text)
            return self._after_answer(session, result), {
                "kind": "answer",
                "score": result.grade.score,
                "next": result.next.kind,
                "phrasing": result.next.phrasing.model_dump(),
            }
        except InterviewError as exc:
            if exc.code in ("session_ended", "time_up"):
                self.engine.close_if_time_up(db, session)
                return self._ended_text(session), {"kind": "ended"}
            if exc.code == "no_followup":
                msg = (
                    "No related question is left; keep answering the current one."
                    if lang == "en"
                    else "没有相关的追问题了，请继续回答当前问题。"
                )
                return msg, {"kind": "no_followup"}
            raise

    # ---------- rendering ----------

    def _grade_text(self, grade: Grade, language: str, probing: bool) -> str:
        en = language == "en"
        covered = sum(kp.covered for kp in grade.key_points)
        total = len(grade.key_points)
        head = (
            f"**Last answer: {grade.score:g}/10** ({covered}/{total} key points)"
            if en
            else f"**上一答得分：{grade.score:g}/10**（覆盖要点 {covered}/{total}）"
        )
        # While the question is still being probed the missed points stay hidden: naming them
        # would hand over the answer to the probe that follows.
        if probing or not grade.feedback:
            return head
        return f"{head}\n{grade.feedback}"

    def _after_answer(self, session: InterviewSession, result: AnswerResponse) -> str:
        probing = result.next.kind == "probe"
        grade = self._grade_text(result.grade, session.language, probing)
        return f"{grade}\n\n{self._next_text(session, result.next)}"

    def _next_text(self, session: InterviewSession, step: NextStep) -> str:
        if step.kind == "end":
            return self._ended_text(session)
        return step.prompt

    def _ended_text(self, session: InterviewSession) -> str:
        report = build_report(self.bank, session, self.engine.phrasing.topic_names)
        en = session.language == "en"
        last = session.turns[-1].text if session.turns and session.turns[-1].kind == "end" else ""
        lines = [last] if last else []
        lines.append(
            f"**Overall: {report.overall_score:g}/10**"
            if en
            else f"**总分：{report.overall_score:g}/10**"
        )
        lines.append("")  # a blank line: the numbered list is a list of its own in Markdown
        for q in report.questions:
            topic = (q.topic_en or q.topic) if en else q.topic
            text = (q.text_en or q.text) if en else q.text
            lines.append(f"{q.number}. [{topic}] {q.score:g}/10 — {shorten(text)}")
        # The link on a line (and paragraph) of its own, so no client folds it into the last item.
        lines += [
            "",
            "Full report:" if en else "完整报告：",
            "",
            self.report_url(session.id, "en" if en else "zh"),
        ]
        return "\n".join(lines)

    def _store(
        self, db: Session, session: InterviewSession, seq: int, text: str, body: str, meta: dict
    ) -> ChatReply:
        deadline = aware(session.deadline)
        remaining = None
        if deadline is not None and session.status != "ended":
            remaining = max(0.0, (deadline - datetime.now(UTC)).total_seconds())
        reply = f"{body}\n\n{marker(session.id, seq, remaining, session.language)}"
        db.add(ChatExchange(session_id=session.id, seq=seq, user_text=text, reply=reply, meta=meta))
        db.flush()
        return ChatReply(reply, session.id, seq, meta=meta)
