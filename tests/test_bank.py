"""The committed question bank: complete, valid, and faithful to the raw source."""

from __future__ import annotations

import pytest

from server.config import Settings
from server.corpus.bank import check_against_source, load_bank
from server.corpus.parser import parse_file
from server.corpus.schema import QuestionEntry
from server.corpus.stats import rubric_coverage
from server.corpus.validate import validate_files


@pytest.fixture(scope="module")
def bank():
    return load_bank(Settings().questions_dir)  # raises with every problem listed


def test_every_entry_has_a_complete_rubric(bank):
    # bank v3: the 191 seed entries and at least 80 supplementary ones, 22+ coding tasks
    assert sum(e.source == "seed" for e in bank) == 191
    assert sum(e.source == "supplementary" for e in bank) >= 80
    assert len(bank) >= 270
    assert all(e.rubric is not None for e in bank)
    _, (total, done) = rubric_coverage(Settings().questions_dir)
    assert total == done == len(bank)
    assert len(list(Settings().coding_dir.glob("*.yaml"))) >= 22


def test_supplementary_entries_cite_their_sources(bank):
    supplementary = [e for e in bank if e.source == "supplementary"]
    assert supplementary and all(e.references for e in supplementary)


def test_bank_matches_the_raw_source(bank):
    parsed = parse_file(next(Settings().raw_dir.glob("*.txt")))
    assert check_against_source(bank, parsed) == []


def test_every_text_has_an_english_version(bank):
    for e in bank:
        assert e.text_en.strip()
        assert all(s.text_en.strip() for s in e.subquestions)
        assert (e.note is None) == (e.note_en is None)


def test_every_entry_has_an_english_reference(bank):
    # issue #25: an English interview shows reference_answer_en in the UI, the report and the chat
    assert [e.id for e in bank if not (e.rubric.reference_answer_en or "").strip()] == []


def test_validator_rejects_an_entry_without_an_english_reference(tmp_path):
    yaml = __import__("yaml")
    data = yaml.safe_load((Settings().questions_dir / "grpo-advantage-baseline.yaml").read_text())
    path = tmp_path / "grpo-advantage-baseline.yaml"
    for missing in (None, "  "):
        data["rubric"]["reference_answer_en"] = missing
        path.write_text(yaml.safe_dump(data, allow_unicode=True))
        assert any("reference_answer_en" in p for p in validate_files([path])), missing


def test_every_misconception_has_an_english_correction(bank):
    # issue #27: English mode shows the correction of a wrong claim in English
    missing = [(e.id, m.id) for e in bank for m in e.rubric.misconceptions if not m.correction_en]
    assert missing == []


def test_validator_rejects_a_misconception_without_an_english_correction(tmp_path):
    yaml = __import__("yaml")
    data = yaml.safe_load((Settings().questions_dir / "grpo-advantage-baseline.yaml").read_text())
    path = tmp_path / "grpo-advantage-baseline.yaml"
    data["rubric"]["misconceptions"][0].pop("correction_en", None)
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    problems = validate_files([path])
    assert any(
        "correction_en" in p and data["rubric"]["misconceptions"][0]["id"] in p for p in problems
    )


def test_related_edges_point_at_real_entries(bank):
    ids = set(bank.ids)
    edges = [(e.id, r.id) for e in bank for r in e.related]
    assert edges and all(target in ids for _, target in edges)


def test_rubric_quality_floor(bank):
    for e in bank:
        rubric = e.rubric
        assert 3 <= len(rubric.key_points) <= 8, e.id
        assert len(rubric.misconceptions) >= 2, e.id
        for kp in rubric.key_points:
            assert len(kp.aliases) >= 2 and kp.probe and kp.probe_en, (e.id, kp.id)


def test_validator_rejects_an_incomplete_rubric(tmp_path):
    data = QuestionEntry.model_validate(
        __import__("yaml").safe_load(
            (Settings().questions_dir / "grpo-advantage-baseline.yaml").read_text()
        )
    ).model_dump(mode="json")
    data["rubric"]["key_points"] = data["rubric"]["key_points"][:2]
    path = tmp_path / "grpo-advantage-baseline.yaml"
    path.write_text(__import__("yaml").safe_dump(data, allow_unicode=True))
    problems = validate_files([path])
    assert problems and "key_points" in problems[0]
    data["rubric"] = None
    path.write_text(__import__("yaml").safe_dump(data, allow_unicode=True))
    assert any("no rubric" in p for p in validate_files([path]))


def test_every_entry_has_search_phrasings_of_its_own(bank):
    """Search compares queries with each entry's phrasings (docs/search.md): every entry has them
    in both languages, in the right script, none copies the entry's own text (they add wordings)
    and none is shared by two entries (it would pull both)."""
    import re

    cjk = re.compile(r"[\u3400-\u9fff]")
    owner: dict[str, str] = {}
    for e in bank:
        p = e.search_phrasings
        assert len(p.zh) >= 4 and len(p.en) >= 3, e.id
        assert all(cjk.search(t) for t in p.zh), e.id
        assert not any(cjk.search(t) for t in p.en), e.id
        own = {e.text, e.text_en} | {s.text for s in e.subquestions}
        own |= {s.text_en for s in e.subquestions}
        for text in p.zh + p.en:
            assert text not in own, (e.id, text)
            key = " ".join(text.lower().split())
            assert owner.setdefault(key, e.id) == e.id, (text, owner[key], e.id)


def test_search_phrasings_are_not_labelled_search_queries(bank):
    """The phrasings are written from the entries; a labelled query copied into them would make
    the retrieval evaluation (and its test split) read its own answers."""
    from server.evaluation.retrieval import RETRIEVAL_SETS, load_many
    from server.retrieval.tokenize import normalise

    queries = {normalise(c.query).replace(" ", "") for c in load_many(RETRIEVAL_SETS)}
    copied = [
        (e.id, t)
        for e in bank
        for t in e.search_phrasings.zh + e.search_phrasings.en
        if normalise(t).replace(" ", "") in queries
    ]
    assert not copied


def test_search_phrasings_do_not_nearly_copy_labelled_queries(bank):
    """Nor a near copy (a word swapped, a particle dropped): it would score as well as a copy. Near
    means sharing at least 60% of character trigrams (Jaccard) once case and spaces are dropped."""
    from server.evaluation.retrieval import RETRIEVAL_SETS, load_many
    from server.retrieval.tokenize import normalise

    def trigrams(text: str) -> set[str]:
        k = normalise(text).replace(" ", "")
        return {k[i : i + 3] for i in range(max(1, len(k) - 2))}

    queries = [(c.query, trigrams(c.query)) for c in load_many(RETRIEVAL_SETS)]
    near = []
    for e in bank:
        for t in e.search_phrasings.zh + e.search_phrasings.en:
            g = trigrams(t)
            for q, qg in queries:
                if len(g & qg) >= 0.6 * len(g | qg):
                    near.append((e.id, t, q))
    assert not near
