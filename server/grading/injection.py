"""Instructions aimed at the grader, in the forms candidates actually use.

They are content of the answer, never commands: the sentence earns nothing and the grade is flagged.
Terms of this field that look like markup (`<answer>`, `<think>`, "system prompt" in an answer about
prompting) are not instructions and never trigger it. Text arrives in `normal_form`, so Traditional
Chinese, full-width letters and zero-width characters cannot hide an instruction."""

from __future__ import annotations

import re

_PATTERNS = [
    # fake grade blocks and verdicts
    r"[{,]\s*[\"']?(score|grade|rating|分数|得分|评分|points?)[\"']?\s*[:=]\s*\d",
    r"(score|grade|分数|得分)\s*[:=：]\s*(10|10\.0|100|满分)\b",
    r"\b10\s*/\s*10\b|\b100\s*/\s*100\b",
    # hidden comments
    r"<!--|\[//\]\s*:|\[comment\]\s*:",
    # appeals to the grader
    r"(给|打|判|评)(我|本题|这个回答|该回答)?\s*(满分|10\s*分|十分|高分|最高分)",
    r"(应得|应该得|值得|理应)(满分|10\s*分|高分)",
    r"(full|maximum|max|perfect|top)\s+(marks|score|points|credit)",
    r"(deserves?|worth|award|give|assign)\s+(it\s+|me\s+|this\s+|the answer\s+)?(a\s+)?(10|ten|full)\b",
    r"(score|grade|rate|mark)\s+(this|the answer|me|it)\s+(as\s+)?(a\s+)?(10|ten|100|full|perfect)",
    r"mark\s+(every|all|each)\s+(key\s*)?points?\s+(as\s+)?(covered|satisfied|met)",
    r"所有(要点|关键点|得分点|key\s*points?).{0,8}(覆盖|满足|通过|算对|判对)",
    r"(every|all)\s+key\s*points?\s+(is|are)\s+(covered|satisfied)",
    r"(the\s+)?rubric\s+(says|states|requires|is\s+(disabled|outdated|replaced))",
    r"评分(标准|规则|细则)\s*(说|规定|写明|已经?更新|已作废|无效)",
    r"(新的|原来的|之前的|更新后的)评分(标准|规则)",
    # overriding instructions
    r"(忽略|无视|忘掉|忘记)(之前|上面|以上|前面|所有|全部|你的)?.{0,10}(指令|规则|标准|要求|提示|评分|rubric)",
    r"ignore\s+(all\s+|any\s+|the\s+|previous\s+|prior\s+|above\s+|your\s+)*(instructions|rubric|rules|grading|criteria)",
    r"disregard\s+(the\s+|all\s+|previous\s+)*(instructions|rubric|rules)",
    r"(以上|上述|之前的?)(指令|规则|要求)(无效|作废|取消)",
    r"new\s+(task|instructions?)\s*[:：]",
    # role-play and fake turns
    r"(你现在是|你现在扮演|你是一[个名位]|假设你是|请你?扮演|扮演一[个名位]).{0,12}(面试官|评分|考官|评委|老师|grader|assistant|助手)",
    r"you\s+are\s+(now\s+)?(a|an|the)\s+(\w+\s+){0,2}(grader|examiner|interviewer|assistant|judge)",
    r"\bact\s+as\s+(a|an|the)\s+(\w+\s+)?(grader|examiner|interviewer|judge)",
    # [^\S\n]: blanks but not newlines, or each "\n" of a long run rescanned all that follow.
    r"(^|\n)[^\S\n]*(system|assistant|human|grader|评分员|系统)\s*[:：]",
    r"\[/?(inst|system)\]|<\|im_(start|end)\|>|<\|(system|user|assistant)\|>",
    r"</?\s*(instructions?|rubric|candidate_answer|grader|grading)\s*>",
    r"###\s*(instruction|system|grader)",
    r"(system|developer)\s+(message|override|note|instruction)\s*[:：]",
    r"(评分(系统|模型|器|员)|阅卷(人|老师)|grader|grading model|evaluator)\s*(请|须|必须|应该|should|must|please)",
    r"(必须|务必|一定要)(输出|给出?|打|判)\s*(10|十|满)",
    r"(输出|返回|return|output|respond with)\s*[\"']?(10|满分)\b",
    r"as\s+an?\s+(ai|language model|grader|evaluator)",
]
# Separate patterns, not one alternation: each then scans with its own literal prefix, which is
# twice as fast overall and keeps every single search far inside the regex budget at max length.
_INJECTION = tuple(re.compile(p, re.IGNORECASE) for p in _PATTERNS)


def is_injection(text: str) -> bool:
    """`text` in normal form (a sentence, a line, or a code comment)."""
    return any(pattern.search(text) for pattern in _INJECTION)


_CODE_COMMENT = re.compile(r"(#|//)(.*)$|/\*(.*?)\*/|\"\"\"(.*?)\"\"\"|'''(.*?)'''", re.M | re.S)


def code_has_injection(code: str) -> bool:
    """Instructions hidden in comments or docstrings of a code block."""
    return any(
        is_injection(next(g for g in m.groups()[1:] if g is not None) or "")
        for m in _CODE_COMMENT.finditer(code)
        if any(g for g in m.groups()[1:])
    )
