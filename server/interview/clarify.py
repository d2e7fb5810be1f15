"""Tell a clarifying question ("你指 token 级还是序列级？") from an answer.

Deterministic, with or without an LLM: a short message that ends with a question mark and asks
about the question itself (its scope, a choice between readings, what a word means). An unsure
answer phrased as a question ("是因为方差大吗？") has no such cue and is graded as an answer."""

from __future__ import annotations

import re

MAX_CLARIFY_CHARS = 120
_ENDS_WITH_QUESTION = re.compile(r"[?？]\s*$")
# Cues that the message asks about the question, not about the subject.
_ZH_CUES = re.compile(
    r"你(?:是)?指|是指|指的是|你的意思|意思是|是说|还是|题目|这道题|这题|这里的|范围|"
    r"包括|包不包括|要不要|需不需要|需要.{0,12}吗|可以.{0,12}吗|能不能.{0,6}(?:说|解释|展开)|"
    r"是哪|哪一种|哪个|请问"
)
_EN_CUES = re.compile(
    r"\b(?:do you mean|you mean|what do you mean|mean by|are you asking|is the question|"
    r"does the question|should i|do you want|can i assume|may i assume|could you clarify|"
    r"can you clarify|which one|which kind|which level|by .{1,40} do you)\b"
    r"|\bor\b.{1,40}\?\s*$",
    re.IGNORECASE,
)


def is_clarifying_question(text: str) -> bool:
    message = text.strip()
    if not message or len(message) > MAX_CLARIFY_CHARS or "\n" in message:
        return False
    if not _ENDS_WITH_QUESTION.search(message):
        return False
    return bool(_ZH_CUES.search(message) or _EN_CUES.search(message))
