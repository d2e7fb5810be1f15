"""Content rules for bank entries: classes of factual error that can be caught mechanically.

Each rule reads only what the entry asserts (reference answers, key points, corrections), never
the misconceptions' wrong statements, which state errors on purpose. `sparring corpus validate`
reports every problem; the rules exist because a reviewer found the error in several entries."""

from __future__ import annotations

import re
import unicodedata

from server.corpus.schema import QuestionEntry


def _norm(text: str) -> str:
    """NFKC, lower case, runs of white space as one space (word edges matter for "k3")."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def _spaced(pattern: str) -> str:
    """Let optional white space stand between the characters of a literal pattern's words."""
    return pattern.replace(" ", r"\s*")


# The k3 KL estimator, by name or by formula.
_K3 = re.compile(
    r"(?<![a-z0-9])k3(?![0-9])|low_var_kl|"
    + _spaced(r"x - log ?x - 1|x - 1 - log ?x|r - 1 - log ?r|π_ref ?/ ?π(?:_θ)? - log ?\(π_ref")
)
_UNBIASED = re.compile(r"无偏|unbiased")
_SENTENCE_END = re.compile(r"[。！？\n]|(?<=[.!?])\s")
# k3 is unbiased for the KL value only when the tokens are sampled from π_θ (GRPO samples from
# π_old): a text that calls it unbiased must say under which samples.
_SAMPLING_CAVEAT = re.compile(
    _spaced(
        r"来自 ?π_θ|从 ?π_θ ?采样|π_θ ?下 ?采样|π_θ ?的 ?样本|(?:samples?|sampled|drawn) (?:drawn )?from ?π_θ|"
        r"under ?π_θ|on-policy ?样本|on-policy ?samples"
    )
)
# ... and as a loss its gradient is that of the forward KL (Liu et al. 2025; Tang & Munos 2025).
_GRADIENT_CAVEAT = re.compile(_spaced(r"正向 ?kl|forward(?:-| )?kl|kl ?\(π_ref ?\|\| ?π"))


def _asserting_fields(entry: QuestionEntry) -> list[tuple[str, str]]:
    assert entry.rubric is not None
    r = entry.rubric
    fields = [("reference_answer", r.reference_answer)]
    if r.reference_answer_en:
        fields.append(("reference_answer_en", r.reference_answer_en))
    for kp in r.key_points:
        fields += [(f"{kp.id}.text", kp.text), (f"{kp.id}.text_en", kp.text_en)]
    fields += [(f"{m.id}.correction", m.correction) for m in r.misconceptions]
    fields += [(f"{m.id}.correction_en", m.correction_en or "") for m in r.misconceptions]
    return fields


def k3_caveat_problems(entry: QuestionEntry) -> list[str]:
    """A field with a sentence calling k3 unbiased must carry the sampling caveat; an entry that
    calls it unbiased anywhere must say somewhere that its gradient as a loss is the forward KL's."""
    if entry.rubric is None:
        return []
    problems = []
    calls_unbiased = False
    gradient_caveat = False
    for name, text in _asserting_fields(entry):
        folded = _norm(text)
        gradient_caveat = gradient_caveat or bool(_GRADIENT_CAVEAT.search(folded))
        sentences = [_norm(s) for s in _SENTENCE_END.split(text)]
        if not any(_K3.search(s) and _UNBIASED.search(s) for s in sentences):
            continue
        calls_unbiased = True
        if not _SAMPLING_CAVEAT.search(folded):
            problems.append(
                f"{entry.id}/{name}: calls k3 unbiased without the caveat that this holds only "
                "for samples from π_θ (e.g. '样本来自 π_θ 时' / 'under samples from π_θ')"
            )
    if calls_unbiased and not gradient_caveat:
        problems.append(
            f"{entry.id}: calls k3 unbiased but never says that, used as a loss, its gradient is "
            "the forward KL's (正向 KL / forward KL(π_ref||π_θ))"
        )
    return problems


# Statements an expert review (issue #13) found wrong in several entries. A reference answer, key
# point or correction must not assert them again; a misconception may state them on purpose.
RETIRED_CLAIMS = (
    (
        "起不到纠偏",
        "a one-sample importance weight is unbiased; say that per-token ratios ignore the prefix shift",
    ),
    ("cannot correct the distribution", "a one-sample importance weight is unbiased"),
    ("新概率上界是", "(1+ε)·π_old is an intuition, not a bound"),
    ("一次更新最多到", "(1+ε)·π_old is an intuition, not a bound"),
    ("只能用 policy-based", "value-based LM methods exist (ILQL, 'From r to Q*')"),
    ("RM 不小于策略", "InstructGPT trained a 175B policy with a 6B RM"),
    ("显存翻倍", "DPO adds a frozen reference's forward pass, not double the memory"),
    ("stale data teach nothing", "stale data destabilise: clip zeroes only favourable excursions"),
    ("陈旧数据学不到东西", "stale data destabilise: clip zeroes only favourable excursions"),
)


def retired_claim_problems(entry: QuestionEntry) -> list[str]:
    if entry.rubric is None:
        return []
    problems = []
    for name, text in _asserting_fields(entry):
        folded = _norm(text).replace(" ", "")
        for claim, why in RETIRED_CLAIMS:
            if _norm(claim).replace(" ", "") in folded:
                problems.append(f"{entry.id}/{name}: asserts the retired claim {claim!r} ({why})")
    return problems


def english_reference_problems(entry: QuestionEntry) -> list[str]:
    """Every rubric carries an English reference (issue #25) and every misconception an English
    correction (issue #27): without them an English interview shows Chinese in the UI, the
    report and the chat."""
    if entry.rubric is None:
        return []
    problems = []
    if not (entry.rubric.reference_answer_en or "").strip():
        problems.append(
            f"{entry.id}: rubric.reference_answer_en is missing or empty (write the English "
            "reference)"
        )
    problems += [
        f"{entry.id}: misconception {m.id} has no correction_en (write the English correction)"
        for m in entry.rubric.misconceptions
        if not (m.correction_en or "").strip()
    ]
    return problems


def content_problems(entry: QuestionEntry) -> list[str]:
    return (
        k3_caveat_problems(entry)
        + retired_claim_problems(entry)
        + english_reference_problems(entry)
    )
