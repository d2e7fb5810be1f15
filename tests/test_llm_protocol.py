"""The grading protocol's pure parts: reading replies, sizing prompts, the answer's language."""

from __future__ import annotations

import json

import pytest

from server.config import Settings
from server.corpus.bank import read_entry_file
from server.corpus.schema import QuestionEntry
from server.grading.llm_protocol import (
    MalformedReply,
    answer_language,
    clean_quote,
    estimate_tokens,
    parse_reply,
    plan_prompt,
    quote_pieces,
)

ENTRY = QuestionEntry.model_validate(
    read_entry_file(Settings().questions_dir / "grpo-advantage-baseline.yaml")
)
IDS = [kp.id for kp in ENTRY.rubric.key_points]
N = len(IDS)


@pytest.fixture(scope="module")
def plan():
    return plan_prompt(
        ENTRY, "对同一个 prompt 采样一组回答。", "zh", Settings().prompts_dir, 8192, 2048
    )


def verdicts(ids, covered=True) -> str:
    return json.dumps({"key_points": [{"id": i, "evidence": "q", "covered": covered} for i in ids]})


@pytest.mark.parametrize(
    ("ids", "repaired"),
    [
        ([f"P{i}" for i in range(1, N + 1)], False),
        ([f"p{i}" for i in range(1, N + 1)], False),
        (IDS, False),
        ([str(i) for i in range(1, N + 1)], True),
        (list(range(1, N + 1)), True),
        ([f"point {i}" for i in range(1, N + 1)], True),
        ([f"#{i}" for i in range(1, N + 1)], True),
        ([kp.text for kp in ENTRY.rubric.key_points], True),
    ],
)
def test_every_id_form_reaches_every_point(plan, ids, repaired):
    parsed = parse_reply(verdicts(ids), plan)
    assert sorted(parsed.covered) == sorted(IDS)
    assert parsed.repaired is repaired


def test_items_without_ids_count_by_position_only_when_complete(plan):
    full = {"key_points": [{"covered": True, "evidence": "q"}] * N}
    assert sorted(parse_reply(json.dumps(full), plan).covered) == sorted(IDS)
    short = {"key_points": [{"covered": True, "evidence": "q"}] * (N - 1)}
    with pytest.raises(MalformedReply):
        parse_reply(json.dumps(short), plan)


def test_a_mapping_of_ids_and_string_booleans_is_read(plan):
    data = {"key_points": {f"P{i}": {"covered": "yes", "evidence": "q"} for i in range(1, N + 1)}}
    assert len(parse_reply(json.dumps(data), plan).covered) == N


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("no json here", "no JSON object"),
        ('{"key_points": [', "no JSON object"),
        ('{"points_list": []}', 'no "key_points"'),
        (verdicts(["P1", "P99"]), "'P99'"),
        (verdicts(["P1"]), "no verdict for P2"),
        (
            json.dumps({"key_points": [{"id": "P1", "covered": "maybe"}]}),
            "is not true or false",
        ),
    ],
)
def test_malformed_replies_name_the_problem(plan, reply, problem):
    with pytest.raises(MalformedReply, match=problem.replace("(", r"\(")):
        parse_reply(reply, plan)


def test_a_truncated_reply_is_malformed_even_if_it_parses(plan):
    with pytest.raises(MalformedReply, match="cut off"):
        parse_reply(verdicts([f"P{i}" for i in range(1, N + 1)]), plan, truncated=True)


def test_unknown_misconception_ids_are_malformed_but_absent_ones_are_not(plan):
    data = json.loads(verdicts([f"P{i}" for i in range(1, N + 1)]))
    data["misconceptions"] = [{"id": "M1", "evidence": "x"}, {"id": "M2", "present": False}]
    assert list(parse_reply(json.dumps(data), plan).misconceptions) == ["critic-baseline"]
    data["misconceptions"] = [{"id": "M42", "evidence": "x"}]
    with pytest.raises(MalformedReply, match="misconception id 'M42'"):
        parse_reply(json.dumps(data), plan)


def test_quotes_lose_wrapper_text_and_split_at_ellipses():
    assert (
        clean_quote("<candidate_answer>\n“baseline 取均值”</candidate_answer>") == "baseline 取均值"
    )
    assert quote_pieces("先采样一组回答 … 再除以标准差做归一化") == [
        "再除以标准差做归一化",
        "先采样一组回答",
    ]


def test_language_of_an_answer():
    assert answer_language("GRPO 的 baseline 是组内奖励的均值") == "zh"
    assert answer_language("The baseline is the group mean, not a critic (组内均值).") == "en"
    assert answer_language("A = (r - μ) / σ", default="en") == "en"


def test_the_token_estimate_is_not_below_a_bpe_count():
    # Qwen's tokenizer: ~1.4 CJK characters and ~4 latin characters per token.
    assert estimate_tokens("组内奖励的均值" * 10) >= 70 / 1.4
    assert estimate_tokens("group mean baseline " * 10) >= 200 / 4


def test_the_reply_budget_shrinks_with_the_points_sent():
    settings = Settings()
    full = plan_prompt(ENTRY, "答" * 100, "zh", settings.prompts_dir, 8192, 2048)
    small = plan_prompt(ENTRY, "答" * 100, "zh", settings.prompts_dir, 1400, 2048)
    assert len(small.points) < len(full.points) and small.max_tokens < full.max_tokens
    assert small.prompt_tokens + small.max_tokens <= 1400
    # the highest-weight point survives the trimming
    top = max(ENTRY.rubric.key_points, key=lambda kp: kp.weight)
    assert top in small.points
