"""Swapped roles and inverted directions, found without an enumerated contradiction.

The rubric says which side of a contrast each fact belongs to: "PPO 用 critic 和 GAE，GRPO 用组内
均值", "MC 方差大，TD 偏差大", "λ 越大方差越大". From the entry's own true texts (reference answer,
key points, corrections; zh and en apart) each content word is tied to the side of a contrast pair
it stands with, clause by clause. An answer clause that names one side and ties to it words the
rubric ties only to the other side — and none of its own — states the contrast backwards: a wrong
claim charged to the key point the words come from. Negated, reported and asked clauses say
nothing either way; a word the rubric ties to both sides is never evidence.

Each pair is checked against the entry's own true sentences when the reader is built, and a pair
that would fire on one of them is not used for that entry."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache

from server.corpus.hygiene import GENERIC_TERMS
from server.grading.claims import has_negation
from server.grading.normalize import normal_form
from server.grading.segments import split_segments
from server.retrieval.tokenize import tokenize

# Sides of contrasts the field draws; each side lists the spellings that name it.
PAIRS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("on-policy", "同策略"), ("off-policy", "异策略")),
    (("value-based", "基于价值"), ("policy-based", "基于策略")),
    (("actor", "策略网络"), ("critic", "价值网络")),
    (("chosen", "y_w"), ("rejected", "y_l")),
    (("前向kl", "正向kl", "forward kl", "kl(π_ref"), ("反向kl", "reverse kl", "kl(π_θ")),
    (("mc", "蒙特卡洛", "蒙特卡罗", "monte carlo"), ("td", "时序差分", "temporal difference")),
    (("上界", "upper bound", "1+ε"), ("下界", "lower bound", "1-ε")),
    (("a>0", "正优势", "positive advantage"), ("a<0", "负优势", "negative advantage")),
    (
        ("越大", "增大", "变大", "larger", "increase", "increases"),
        ("越小", "减小", "变小", "smaller", "decrease", "decreases"),
    ),
    (("越高", "升高", "提高", "higher"), ("越低", "降低", "lower")),
    (("在线", "online"), ("离线", "offline")),
    (("token级", "token 级", "token-level"), ("序列级", "sequence-level")),
    (("mode-seeking", "寻模"), ("mass-covering", "mean-seeking", "覆盖")),
    (("稀疏", "sparse"), ("稠密", "dense")),
    (("prm", "过程奖励"), ("orm", "结果奖励")),
    (("行为策略", "behaviour policy", "behavior policy"), ("目标策略", "target policy")),
    (("分子", "numerator"), ("分母", "denominator")),
    (("ppo",), ("grpo",)),
    (("ppo",), ("dpo",)),
    (("grpo",), ("dapo",)),
    (("grpo",), ("gspo",)),
    (("trpo",), ("ppo",)),
    (("sarsa",), ("q-learning", "q learning")),
    (("sft",), ("rl", "强化学习")),
)
# Direction words (larger/smaller, higher/lower) say which way something moves; in a clause that
# names both sides of another pair ("MC has higher variance than TD") they compare those two, not
# anything the entry ties to a direction.
DIRECTION_PAIRS = frozenset(i for i, (a, _) in enumerate(PAIRS) if a[0] in ("越大", "越高"))
_CLAUSE = re.compile(r"[,;:，；：。！？!?\n()（）]|\band\b|\bwhile\b|\bwhereas\b|而|但|却")
_CJK = re.compile(r"[\u4e00-\u9fff]")
MIN_CONFLICTS = 2  # words tied to the other side that one clause must carry
MIN_TIES = 2  # clauses of the true texts that tie a word to its side


@dataclass(frozen=True)
class SwappedClaim:
    pair: int
    side: int  # the side the clause names
    words: tuple[str, ...]  # words it ties there that belong to the other side
    point: str | None  # the key point the words come from
    clause: str  # the clause, in normal form

    def describe(self) -> str:
        a, b = PAIRS[self.pair]
        named, other = (a, b) if self.side == 0 else (b, a)
        return f"{named[0]} ↔ {other[0]}: {', '.join(self.words)}"


def _clauses(norm: str) -> list[str]:
    return [c.strip() for c in _CLAUSE.split(norm) if c and c.strip()]


@lru_cache(maxsize=64)
def _side_patterns(pair: int) -> tuple[re.Pattern[str], re.Pattern[str]]:
    def pattern(names: tuple[str, ...]) -> re.Pattern[str]:
        alts = []
        for name in names:
            body = re.escape(normal_form(name)).replace(r"\ ", r"\s*")
            if name[0].isascii() and name[0].isalnum():
                body = r"(?<![a-z0-9_])" + body
            if name[-1].isascii() and name[-1].isalnum():
                body += r"(?![a-z0-9_])"
            alts.append(body)
        return re.compile("|".join(alts))

    a, b = PAIRS[pair]
    return pattern(a), pattern(b)


def _sides(clause: str, pair: int) -> tuple[bool, bool]:
    pa, pb = _side_patterns(pair)
    return bool(pa.search(clause)), bool(pb.search(clause))


def _words(clause: str, pair: int) -> set[str]:
    """The clause's content words, the names of the pair's sides left out."""
    pa, pb = _side_patterns(pair)
    return _plain_words(pb.sub(" ", pa.sub(" ", clause)))


def _language(text: str) -> str:
    return "zh" if _CJK.search(text) else "en"


class RoleMap:
    """Per entry: which side of each contrast pair each word stands with in the true texts."""

    def __init__(self, true_texts: list[tuple[str | None, str]]) -> None:
        # (pair, language) -> word -> set of sides; word -> key point it came from
        self.ties: dict[tuple[int, str], dict[str, list[int]]] = defaultdict(
            lambda: defaultdict(lambda: [0, 0])
        )
        self.origin: dict[str, str] = {}
        for point, text in true_texts:
            norm = normal_form(text)
            for clause in _clauses(norm):
                if has_negation(clause):
                    continue
                lang = _language(clause)
                for pair in range(len(PAIRS)):
                    a, b = _sides(clause, pair)
                    if a == b:
                        continue
                    side = 0 if a else 1
                    for w in _words(clause, pair):
                        self.ties[(pair, lang)][w][side] += 1
                        if point is not None:
                            self.origin.setdefault(w, point)
        self.disabled: set[int] = set()
        # A pair that fires on the entry's own true texts is not trusted for this entry.
        for _, text in true_texts:
            for claim in self.swapped(normal_form(text)):
                self.disabled.add(claim.pair)

    def swapped(self, norm: str) -> list[SwappedClaim]:
        found = []
        for clause in _clauses(norm):
            if has_negation(clause) or clause.endswith(("?", "？")):
                continue
            lang = _language(clause)
            for pair in range(len(PAIRS)):
                if pair in self.disabled:
                    continue
                ties = self.ties.get((pair, lang))
                if not ties:
                    continue
                a, b = _sides(clause, pair)
                if a == b:
                    continue
                side = 0 if a else 1
                # The rubric must say something of the side the clause names: an entry that
                # describes only GRPO cannot tell what belongs to PPO.
                if sum(1 for t in ties.values() if t[side] > 0) < MIN_TIES:
                    continue
                if pair in DIRECTION_PAIRS and self._compares_another_pair(clause, pair):
                    continue
                # Sorted: a set's order changes with the process's hash seed, and the key point a
                # claim is charged to (the first word's) must not change between restarts.
                words = sorted(_words(clause, pair))
                own = [w for w in words if w in ties and ties[w][side] > 0]
                # Only a word the true texts tie to the other side more than once, never to this one.
                other = [
                    w
                    for w in words
                    if w in ties and ties[w][side] == 0 and ties[w][1 - side] >= MIN_TIES
                ]
                if len(other) >= MIN_CONFLICTS and not own:
                    point = next((self.origin[w] for w in other if w in self.origin), None)
                    found.append(SwappedClaim(pair, side, tuple(sorted(other)), point, clause))
        return found

    @staticmethod
    def _compares_another_pair(clause: str, pair: int) -> bool:
        return any(
            other != pair and other not in DIRECTION_PAIRS and all(_sides(clause, other))
            for other in range(len(PAIRS))
        )


_METHODS = (
    "ppo",
    "grpo",
    "dpo",
    "dapo",
    "gspo",
    "rloo",
    "reinforce++",
    "remax",
    "trpo",
    "kto",
    "ipo",
    "simpo",
    "orpo",
    "vapo",
    "cispo",
    "dr. grpo",
    "dr.grpo",
    "sac",
    "ddpg",
    "td3",
    "dqn",
)
_METHOD = re.compile(
    r"(?<![a-z0-9_+.])("
    + "|".join(re.escape(m) for m in sorted(_METHODS, key=len, reverse=True))
    + r")(?![a-z0-9_+])"
)


def _methods(norm: str) -> frozenset[str]:
    """The named RL methods in a text (normal form)."""
    return frozenset(m.group(1) for m in _METHOD.finditer(norm))


class MisconceptionParaphrase:
    """A misconception stated in other words than its aliases: a clause that carries the words
    that make the misconception wrong (the ones no true text of the entry uses) together with
    its subject (the words it shares with the key point it gets wrong).

    "baseline 是整个 batch 里所有样本奖励的平均值" has the distinctive words of "GRPO 的 baseline 是整个
    batch 所有样本的平均奖励" (整个, batch, 所有, 样本) and its subject (baseline). Disabled for a
    misconception when it would fire on one of the entry's own true texts."""

    def __init__(
        self, texts: tuple[str, ...], point_texts: tuple[str, ...], true_texts: list[str]
    ) -> None:
        true_words: set[str] = set()
        for t in true_texts:
            true_words |= _plain_words(normal_form(t))
        point_words: set[str] = set()
        for t in point_texts:
            point_words |= _plain_words(normal_form(t))
        self.forms: list[tuple[frozenset[str], frozenset[str]]] = []
        # The methods the misconception is about: a clause about another method only is not it
        # ("REINFORCE++ normalises over the whole batch" is true, "GRPO's group is a batch" not).
        self.methods = frozenset().union(*(_methods(normal_form(t)) for t in texts))
        for text in texts:
            if has_negation(normal_form(text)):
                continue  # "不存在 reward hacking": its words also make the true statement
            words = _plain_words(normal_form(text))
            distinctive = frozenset(words - true_words)
            subject = frozenset(words & point_words)
            if len(distinctive) >= 2 and subject:
                self.forms.append((distinctive, subject))
        if any(self.fires(normal_form(t)) for t in true_texts):
            self.forms = []

    def fires(self, norm: str) -> str | None:
        """The clause that states the misconception, if one does."""
        if not self.forms:
            return None
        for clause in _clauses(norm):
            if has_negation(clause) or clause.endswith(("?", "？")):
                continue
            named = _methods(clause)
            if named and not named & self.methods:
                continue
            words = _plain_words(clause)
            for distinctive, subject in self.forms:
                need = max(2, -(-len(distinctive) * 6 // 10))
                if len(words & distinctive) >= need and words & subject:
                    return clause
        return None


@dataclass(frozen=True)
class _Restated:
    words: frozenset[str]  # the misconception's words
    wrong: frozenset[str]  # its words that the closest true text does not use
    right: frozenset[str]  # the closest true text's words that it does not use
    negated: bool
    clauses: int


class MisconceptionRestatement:
    """A misconception said nearly in its own words: a run of clauses holding most of its words,
    with its polarity, the words that tell it from the entry's closest true sentence ("无偏" where
    the truth says "有偏") and none of that sentence's own telling words.

    Aliases are short; an answer that states "TD3 把 DDPG 的确定性策略换成了随机策略" almost as the
    bank writes it must not pass for want of one. Disabled for a wording that fires on any true
    sentence of the entry."""

    def __init__(self, texts: tuple[str, ...], true_texts: list[str]) -> None:
        # The grader's own sentence splitter, as the phrase cross-check uses it.
        sentences = [seg.key for t in true_texts for seg in split_segments(normal_form(t))]
        true_sets = [w for w in (_plain_words(p) for p in sentences if p) if w]
        self.true_sets = true_sets
        self.forms: list[_Restated] = []
        for text in texts:
            norm = normal_form(text)
            words = _plain_words(norm)
            if len(words) < 3:
                continue
            nearest = max(true_sets, key=lambda t: len(words & t) / len(words | t), default=set())
            wrong = words - nearest
            if not wrong:
                continue  # nothing tells it from a true sentence
            form = _Restated(
                frozenset(words),
                frozenset(wrong),
                frozenset(nearest - words),
                _negated(norm),
                max(1, len(_clauses(norm))),
            )
            if not any(self._match(form, *_clause_words(p)) for p in sentences if p):
                self.forms.append(form)

    def fires(self, norm: str) -> str | None:
        """The clauses that restate the misconception, if some do. The whole sentence must read
        like it too: its polarity, none of the closest true sentence's telling words, and closer
        to the misconception than to any true sentence of the entry."""
        if not self.forms:
            return None
        sentence = _plain_words(norm)
        negated = _negated(norm)
        clauses, clause_words = _clause_words(norm)  # read once for every form
        closest_truth: float | None = None  # computed once, and only when a form matches
        for form in self.forms:
            found = self._match(form, clauses, clause_words)
            if found is None or negated != form.negated or sentence & form.right:
                continue
            if closest_truth is None:
                closest_truth = max((_jaccard(sentence, t) for t in self.true_sets), default=0.0)
            if _jaccard(sentence, form.words) > closest_truth:
                return found
        return None

    def _match(
        self, form: _Restated, clauses: list[str], clause_words: list[set[str]]
    ) -> str | None:
        # A cheap exit before any window: the sentence must hold every telling word.
        if not form.wrong <= set().union(*clause_words):
            return None
        # A short misconception is all telling words (its subject, its direction): every one.
        need = len(form.words) if len(form.words) <= 6 else -(-len(form.words) * 85 // 100)
        for width in range(1, form.clauses + 1):
            for start in range(0, len(clauses) - width + 1):
                window = clauses[start : start + width]
                if _negated(" ".join(window)) != form.negated:
                    continue
                words: set[str] = set().union(*clause_words[start : start + width])
                if (
                    len(words & form.words) >= need
                    and form.wrong <= words
                    and not (words & form.right)
                ):
                    return window[0] if width == 1 else " ".join(window)
        return None


def _clause_words(norm: str) -> tuple[list[str], list[set[str]]]:
    """A sentence's clauses and each clause's words."""
    clauses = _clauses(norm)
    return clauses, [_plain_words(c) for c in clauses]


def _negated(norm: str) -> bool:
    # "解决不了" / "做不到" deny as plainly as "不能解决"
    return has_negation(norm) or "不了" in norm or "不到" in norm


def _jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def _plain_words(text: str) -> set[str]:
    return {
        w
        for w in tokenize(text)
        if len(w) >= 2
        and w not in GENERIC_TERMS
        and not w.isdigit()
        and any(c.isalnum() for c in w)
    }
