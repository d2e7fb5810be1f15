"""Which question an answer answers: its lexical affinity to every entry of the bank.

An answer to a neighbouring question shares terms with this one (GAE and the advantage, the
critic and the reward model) and can collect a point or two through them. What gives it away is
that it reads closer to the other question's rubric than to this one's. Each entry is a TF-IDF
vector of its question, reference answers, key points and aliases (jieba words for Chinese, Latin
terms whole); `affinity` is the answer's cosine to its own entry over its best cosine to any
entry (1.0 when its own entry is the closest). Built once per bank, in memory, in about a second."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from server.corpus.schema import QuestionEntry
from server.grading.normalize import normal_form
from server.retrieval.tokenize import tokenize


def entry_document(entry: QuestionEntry) -> str:
    parts = [entry.text, entry.text_en, *(s.text for s in entry.subquestions)]
    parts += [s.text_en for s in entry.subquestions]
    r = entry.rubric
    if r is not None:
        parts += [r.reference_answer, r.reference_answer_en or ""]
        for kp in r.key_points:
            parts += [kp.text, kp.text_en, " ".join(kp.aliases)]
    return normal_form(" \n ".join(parts))


@dataclass(frozen=True)
class Affinity:
    own: float  # cosine to the answer's own entry
    best: float  # best cosine to any entry
    best_id: str

    @property
    def ratio(self) -> float:
        return 1.0 if self.best <= 0 else min(1.0, self.own / self.best)


class BankAffinity:
    def __init__(self, entries: list[QuestionEntry]) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.ids = [e.id for e in entries]
        self.index = {eid: i for i, eid in enumerate(self.ids)}
        self.vectorizer = TfidfVectorizer(
            analyzer=lambda text: list(tokenize(text)), sublinear_tf=True, min_df=1
        )
        self.matrix = self.vectorizer.fit_transform([entry_document(e) for e in entries])

    def of(self, entry_id: str, answer_norm: str) -> Affinity | None:
        i = self.index.get(entry_id)
        if i is None:
            return None
        vector = self.vectorizer.transform([answer_norm])
        if vector.nnz == 0:
            return Affinity(0.0, 0.0, entry_id)
        sims = np.asarray((self.matrix @ vector.T).todense()).ravel()
        best = int(sims.argmax())
        return Affinity(float(sims[i]), float(sims[best]), self.ids[best])
