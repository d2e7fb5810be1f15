"""Bank text (plain text with bare math such as `V(s_{t+1})` and unfenced code) as Markdown, for
the UI and the Markdown report.

Bank entries write math the way people type it, not as LaTeX: `r_t`, `π_θ(a_t|s_t)`, `L^CLIP`,
`δ_{t+l}`. Shown raw, the braces and underscores read as noise (and `_`/`*`/`~` can turn into
emphasis), so sub- and superscripts become <sub>/<sup>. Text the author already delimited as
LaTeX (`$…$`, `\\(…\\)`) or code (backticks) is left for KaTeX / the code renderer, which is how
the chat shows answers."""

from __future__ import annotations

import re
import textwrap

# Spans left exactly as they are: LaTeX the chat renders with KaTeX, code spans, links.
_PROTECTED = re.compile(
    r"(\$\$.+?\$\$|\$[^$\n]+\$|\\\(.+?\\\)|\\\[.+?\\\]|`+[^`]*`+|https?://\S+)", re.S
)
_LETTER = r"A-Za-zα-ωΑ-Ω∇Σ"
# The base of a subscript is one letter (with primes), or an operator word, never the tail of an
# identifier: `old_logp` and `log_std` stay as they are.
_BASE = (
    rf"(?:(?<![A-Za-z0-9_])(?:argmax|argmin|max|min|sup|inf|lim)|(?<![A-Za-z0-9_])[{_LETTER}]'*)"
)
_GROUP = r"\{((?:[^{}]|\{[^{}]*\})*)\}"
_SUB = re.compile(rf"({_BASE})_(?:{_GROUP}|([{_LETTER}0-9]+))")
_SUP = re.compile(rf"({_BASE}|[)\]|])\^(?:{_GROUP}|([{_LETTER}0-9]+|[-+*′']))")
_CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
_CODE_START = re.compile(
    r"^(import |from \S+ import |def |class |return\b|for .*:|while .*:|if .*:|elif .*:|else:|"
    r"with .*:|try:|except\b|@\w|# )"
)
# Possessive (*+): the name part and \s* both take spaces, and giving them back was quadratic.
_ASSIGNMENT = re.compile(r"^[A-Za-z_][\w.\[\](), ]*+\s*(=|\+=|-=|\*=|/=)\s*\S")


_TAGS = {"sub": ("\x01", "\x02"), "sup": ("\x03", "\x04")}  # placeholders while escaping
_HTML = {"\x01": "<sub>", "\x02": "</sub>", "\x03": "<sup>", "\x04": "</sup>"}


def _scripts(text: str) -> str:
    """Sub/superscripts as placeholder-delimited runs (see _TAGS)."""

    def wrap(kind: str):
        def repl(m: re.Match) -> str:
            inner = m.group(2) if m.group(2) is not None else m.group(3)
            opening, closing = _TAGS[kind]
            return f"{m.group(1)}{opening}{_scripts(inner)}{closing}"

        return repl

    before = None
    while before != text:  # `V_θ^2`, nested groups: repeat until nothing changes
        before = text
        text = _SUP.sub(wrap("sup"), _SUB.sub(wrap("sub"), text))
    return text


def _html(text: str) -> str:
    for mark, tag in _HTML.items():
        text = text.replace(mark, tag)
    return text


def _escape(text: str) -> str:
    """Characters that would turn plain prose into emphasis, strikethrough or raw HTML."""
    for char in "\\*_~":
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;")


def _outside_protected(text: str, fn) -> str:
    parts = _PROTECTED.split(text)
    return "".join(p if i % 2 else fn(p) for i, p in enumerate(parts))


def readable_math(text: str) -> str:
    """Bare sub/superscripts as <sub>/<sup>, outside LaTeX and code spans. For text that is
    already Markdown (interviewer lines, key points): nothing else is escaped."""
    return _outside_protected(text, lambda part: _html(_scripts(part)))


def prose_markdown(text: str) -> str:
    """One line of plain bank prose as Markdown: escaped, with readable sub/superscripts."""
    line = _outside_protected(text, lambda part: _html(_escape(_scripts(part))))
    # "1) …" or "# …" at the start of a line is the author's text, not a list or a heading.
    line = re.sub(r"^(\d+)([.)])(\s)", r"\1\\\2\3", line)
    return "\\" + line if line.startswith(("#", ">", "+ ")) else line


def _is_code(line: str) -> bool:
    if not line.strip():
        return False
    if line.startswith(("  ", "\t")):
        return True
    code = line.split("#", 1)[0]
    if _CJK.search(code):
        return False
    return bool(_CODE_START.match(line) or _ASSIGNMENT.match(line))


def bank_markdown(text: str) -> str:
    """A multi-line bank text (a reference answer) as Markdown: each line stays a line, runs of
    code lines (indented, or Python statements) become fenced blocks, prose gets readable math.
    Text that already has ``` fences keeps them."""
    if "```" in text:
        return text
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if _is_code(lines[i]):
            block = []
            while i < len(lines) and (
                _is_code(lines[i])
                or (not lines[i].strip() and i + 1 < len(lines) and _is_code(lines[i + 1]))
            ):
                block.append(lines[i])
                i += 1
            out.append("```python\n" + textwrap.dedent("\n".join(block)).strip("\n") + "\n```")
            continue
        if lines[i].strip():
            out.append(prose_markdown(lines[i].strip()))
        i += 1
    return "\n\n".join(out)


def inline_quote(text: str, limit: int | None = None) -> str:
    """A quote from an answer, safe inside a list item or table cell: one line; when it holds code
    (a ``` block or several lines), a code span whose backtick fence is longer than any run
    inside it, so the quote can never open a block or swallow the rest of the card."""
    has_code = "```" in text or "\n" in text.strip()
    flat = re.sub(r"```[\w+-]*(?=\s)|```", " ", text) if has_code else text
    flat = " ".join(flat.split())
    if limit is not None and len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    if not has_code:
        return readable_math(flat)
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {flat} {fence}"
