"""Every regex in `server/` stays linear on hostile text (issue 24, item 1).

One backtracking pattern (`\\bseed\\s*[=:]?\\s*\\d` on "seed" + 24,000 spaces) once held the
interpreter lock for 43 s and froze every route. This test finds every pattern the server compiles:
the module-level (and class-level) `re.Pattern` objects of every module under `server/`, and every
pattern written literally in a `re.*` call in the source (f-string parts filled with a sample), plus
the ones functions build (the chat's area pattern, code_extract's def pattern). Each is searched
in adversarial inputs at the longest text a request may carry (Settings.max_answer_chars): runs of
spaces and repeated characters, each pattern's own words pumped (repeated alternation prefixes),
unclosed brackets, mixed CJK/Latin. Any single search over 50 ms of CPU time fails.

CPU time of this thread (time.thread_time), best of three, so a loaded machine does not fail it:
a regex search holds the GIL and runs on one thread."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import time
from pathlib import Path

import pytest

import server
from server.config import Settings

BUDGET_SECONDS = 0.050
ROOT = Path(server.__file__).resolve().parent
SKIP_MODULES = {"server.asgi"}  # builds no patterns; importing it is harmless but pointless
LENGTH = Settings().max_answer_chars
_RE_CALLS = {
    "compile",
    "search",
    "match",
    "fullmatch",
    "findall",
    "finditer",
    "sub",
    "subn",
    "split",
}


def _patterns_in(value: object, depth: int = 0) -> list[re.Pattern]:
    if isinstance(value, re.Pattern):
        return [value]
    if depth >= 2:
        return []
    if isinstance(value, (list, tuple, set, frozenset)):
        return [p for v in value for p in _patterns_in(v, depth + 1)]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _patterns_in(v, depth + 1)]
    return []


def module_patterns() -> dict[str, re.Pattern]:
    found: dict[str, re.Pattern] = {}
    for info in pkgutil.walk_packages([str(ROOT)], prefix="server."):
        if info.name in SKIP_MODULES:
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            owner = value if isinstance(value, type) and value.__module__ == info.name else None
            values = [(name, value)]
            if owner is not None:
                values += [(f"{name}.{k}", v) for k, v in vars(owner).items()]
            for label, v in values:
                for i, pattern in enumerate(_patterns_in(v)):
                    found[f"{info.name}.{label}[{i}]"] = pattern
    return found


def _flags(call: ast.Call) -> int:
    flags = 0
    nodes = [kw.value for kw in call.keywords if kw.arg == "flags"]
    if call.func.attr in ("compile",) and len(call.args) > 1:  # type: ignore[attr-defined]
        nodes.append(call.args[1])
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(getattr(re, sub.attr, None), int):
                flags |= getattr(re, sub.attr)
    return flags


def _literal(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # an f-string: each {value} becomes a sample word
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("grpo")
        return "".join(parts)
    return None


def source_patterns() -> dict[str, re.Pattern]:
    found: dict[str, re.Pattern] = {}
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "re"
                and node.func.attr in _RE_CALLS
                and node.args
            ):
                continue
            text = _literal(node.args[0])
            if text is None:
                continue
            try:
                pattern = re.compile(text, _flags(node))
            except re.error:
                continue  # an f-string whose sample does not make a valid pattern
            found[f"{path.relative_to(ROOT.parent)}:{node.lineno}"] = pattern
    return found


def built_patterns() -> dict[str, re.Pattern]:
    from server.grading.code_extract import _def_line
    from server.interview.chat import area_pattern

    found = {f"chat.area_pattern({a})": area_pattern(a) for a in ("rl-basics", "grpo")}
    found["code_extract._def_line(compute_gae)"] = _def_line("compute_gae")
    return found


def all_patterns() -> dict[str, re.Pattern]:
    return {**module_patterns(), **source_patterns(), **built_patterns()}


_WORD = re.compile(r"[A-Za-z\u3400-\u9fff_=:#\[\]{}<>-]{2,}")


def pumped(text: str) -> str:
    """`text` repeated to the maximum length."""
    return (text * (LENGTH // max(1, len(text)) + 1))[:LENGTH]


def adversarial(pattern: re.Pattern) -> list[str]:
    n = LENGTH
    inputs = [
        " " * n,
        "seed" + " " * (n - 5) + "x",
        "a" * n,
        "1" * n,
        "\n" * n,
        " \t" * (n // 2),
        "[" * n,
        "(" * n,
        "{" * n,
        "<" * n,
        '"' * n,
        "\\" * n,
        "$" * n,
        "*" * n,
        "#" * n,
        "-" * n,
        "." * n,
        "中" * n,
        pumped("中a "),
        pumped("题1 "),
        pumped("a1"),
        pumped("a "),
        pumped("1 "),
        pumped("1."),
        pumped("ab-"),
        pumped("[sparring session=" + "a" * 32 + " turn=1 "),
        "[sparring session=" + "a" * 32 + " turn=" + "1" * (n - 60),
        pumped("$x_"),
        pumped("`"),
        pumped("```"),
        pumped("**"),
        pumped("\\frac{"),
    ]
    # The pattern's own words, pumped: "seed seed seed ...", "seed" + spaces, "=: =: ...".
    for word in dict.fromkeys(_WORD.findall(pattern.pattern)[:12]):
        inputs += [
            pumped(word),
            pumped(word + " "),
            word + " " * (n - len(word) - 1) + "!",
            pumped(word + "1"),
        ]
    # Its own punctuation pumped too: 「「「..., ……, ：：：...
    own = [c for c in pattern.pattern if not c.isascii() and not "\u3400" <= c <= "\u9fff"]
    for ch in list(dict.fromkeys(own))[:8]:
        inputs += [pumped(ch), pumped(ch + " "), pumped(ch + "a")]
    return inputs


def cpu_time(pattern: re.Pattern, text: str) -> float:
    """Best of three; a search far over the budget is not repeated (it is not noise)."""
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        pattern.search(text)
        best = min(best, time.thread_time() - start)
        if best <= BUDGET_SECONDS or best > 10 * BUDGET_SECONDS:
            break
    return best


PATTERNS = all_patterns()


def test_patterns_were_found():
    """The search above finds the patterns it is meant to (a guard against finding none)."""
    labels = " ".join(PATTERNS)
    assert len(PATTERNS) > 60
    assert "server.interview.chat.MARKER_RE" in labels
    assert "server.interview.chat._SEED_RE" in labels
    assert "server/grading/claims.py" in labels or "server.grading.claims" in labels


@pytest.mark.parametrize("label", sorted(PATTERNS))
def test_every_search_stays_within_budget(label):
    pattern = PATTERNS[label]
    slow = []
    for text in adversarial(pattern):
        spent = cpu_time(pattern, text)
        if spent > BUDGET_SECONDS:
            slow.append(f"{spent * 1000:.0f} ms on {text[:40]!r}... ({len(text)} chars)")
            if len(slow) >= 3:
                break  # enough to show; a quadratic pattern would take minutes on all inputs
    assert not slow, f"{label} /{pattern.pattern[:120]}/ is too slow: " + "; ".join(slow[:3])


def test_the_seed_payload_is_linear():
    """The exact payload of the report: the opening-message regexes on seed + 24,000 spaces."""
    from server.interview import chat

    text = "seed" + " " * 24000 + "x"
    for pattern in (chat._SEED_RE, chat._COUNT_RE, chat._MINUTES_RE, chat._GRADER_RE):
        assert cpu_time(pattern, text) <= BUDGET_SECONDS, pattern.pattern
