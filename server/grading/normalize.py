"""One normal form for everything the grader matches: answers, aliases, key points, contradictions.

Invisible and compatibility characters must not change what an answer says: zero-width spaces,
soft hyphens and full-width letters are folded away, Traditional Chinese is read as Simplified, and
LaTeX is read as the symbols it denotes, so "\\lambda" and "λ" evidence the same point."""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

# Unicode "format" characters (zero-width space/joiners, soft hyphen, BOM, bidi marks...).
_SPACES = re.compile(r"\s+")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_MACRO = re.compile(r"\\[a-zA-Z]+")
_local = threading.local()


def _converter():
    # OpenCC objects are not documented as thread-safe: one per thread.
    conv = getattr(_local, "t2s", None)
    if conv is None:
        import opencc

        conv = opencc.OpenCC("t2s")
        _local.t2s = conv
    return conv


_FORMAT_BETWEEN_LATIN = re.compile(
    r"(?<=[A-Za-z0-9])[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]+(?=[A-Za-z0-9])"
)


def strip_format_chars(text: str) -> str:
    """Format characters go; where they are sparse, one between two Latin letters stands for the
    space it hides, so "baseline\u200bstd" stays two words."""
    format_chars = sum(1 for c in text if unicodedata.category(c) == "Cf")
    if format_chars and format_chars < 0.2 * len(text):
        # Sparse: they separate words. Dense (between every letter): they hide words; drop them.
        text = _FORMAT_BETWEEN_LATIN.sub(" ", text)
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


@lru_cache(maxsize=4096)
def _latex_to_text(span: str) -> str:
    from pylatexenc.latex2text import LatexNodes2Text

    try:
        # "%" starts a LaTeX comment; in an answer it is a percent sign.
        return LatexNodes2Text(math_mode="text").latex_to_text(span.replace("%", r"\%"))
    except Exception:  # malformed LaTeX is read as it is written
        return span


def read_latex(text: str) -> str:
    """Math spans and stray macros as plain symbols: $\\pi_\\theta$ → π_θ, \\frac{a}{b} → a/b."""
    if "\\" not in text and "$" not in text:
        return text
    text = _MATH_SPAN.sub(
        lambda m: " " + _latex_to_text(next(g for g in m.groups() if g)) + " ", text
    )
    if _MACRO.search(text):
        text = _latex_to_text(text)
    return text


@lru_cache(maxsize=16384)
def normal_form(text: str) -> str:
    """Format characters removed, NFKC (full-width → half-width), Traditional → Simplified,
    LaTeX read as symbols, lower case, single spaces."""
    text = strip_format_chars(text)
    text = read_latex(text)
    text = unicodedata.normalize("NFKC", text)
    text = _converter().convert(text)
    return _SPACES.sub(" ", text.lower()).strip()


def compact(text: str) -> str:
    """The normal form without spaces: how aliases and contradictions are compared."""
    return normal_form(text).replace(" ", "")
