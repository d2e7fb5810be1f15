"""Issue #18: each way a real (small, local) model broke the LLM grader, replayed against the
scripted OpenAI-compatible server on loopback through litellm."""

from __future__ import annotations

import json
import logging

import pytest

from server.config import Settings
from server.corpus.bank import read_entry_file
from server.corpus.schema import QuestionEntry
from server.grading.llm_protocol import output_budget
from server.grading.models import GraderChoice
from server.grading.service import GradingService
from tests.support.scripted_llm import ScriptedLLM, prompt_parts, scripted_tokens

ANSWER = (
    "对同一个 prompt 采样一组 G 条回答，baseline 取组内奖励的均值，"
    "再除以标准差：A_i = (r_i - mean) / (std + eps)。这样就不需要 critic。"
)
QUOTES = {
    "group-sampling": "对同一个 prompt 采样一组 G 条回答",
    "group-mean": "baseline 取组内奖励的均值",
    "std-normalization": "A_i = (r_i - mean) / (std + eps)",
    "replaces-critic": "这样就不需要 critic",
}
ENTRY = QuestionEntry.model_validate(
    read_entry_file(Settings().questions_dir / "grpo-advantage-baseline.yaml")
)
RUBRIC = ENTRY.rubric
ORDER = [kp.id for kp in RUBRIC.key_points]  # read, not listed: the bank's rubric may grow
HONEST = [p for p in ORDER if p in QUOTES]
N_POINTS, N_WRONG = len(ORDER), len(RUBRIC.misconceptions)
HONEST_SCORE = round(
    10
    * sum(kp.weight for kp in RUBRIC.key_points if kp.id in QUOTES)
    / sum(kp.weight for kp in RUBRIC.key_points),
    1,
)


@pytest.fixture(scope="module")
def entry() -> QuestionEntry:
    return ENTRY


@pytest.fixture(scope="module")
def llm():
    # One request at a time, like a single-slot llama.cpp server.
    with ScriptedLLM(serial=True) as server:
        yield server


def make_service(llm: ScriptedLLM, **overrides) -> GradingService:
    settings = dict(
        llm_model="openai/scripted-grader",
        llm_api_base=llm.base_url,
        llm_api_key="test-key",
        # room for litellm's cold start on a loaded 2-core machine; a trickle takes minutes
        llm_timeout_seconds=6,
        llm_max_retries=1,
        sandbox_enabled=False,
    )
    settings.update(overrides)
    return GradingService(Settings(**settings))


@pytest.fixture(scope="module")
def service(llm) -> GradingService:
    return make_service(llm)


def points(ids: list[str], quotes: dict[str, str] | None = None) -> list[dict]:
    """One verdict per id, in rubric order: covered with its quote for the honest points."""
    quotes = QUOTES if quotes is None else quotes
    return [
        {"id": i, "evidence": quotes.get(real, ""), "covered": real in quotes}
        for i, real in zip(ids, ORDER, strict=False)
    ]


def reply(ids: list[str], feedback: str = "核心正确，缺少 token 广播。", **extra) -> str:
    data = {"key_points": points(ids), "misconceptions": [], "feedback": feedback, **extra}
    return json.dumps(data, ensure_ascii=False)


SHORT_IDS = [f"P{i}" for i in range(1, N_POINTS + 1)]


def covered(grade) -> list[str]:
    return [kp.id for kp in grade.key_points if kp.covered]


# -------------------------------------------------------------------------- the happy path


def test_happy_path_short_ids_budgeted_reply_schema(llm, entry):
    service = make_service(llm, llm_response_format="json_schema")
    llm.script(("reply", reply(SHORT_IDS)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.grader == "llm:openai/scripted-grader" and grade.fallback_reason is None
    assert covered(grade) == HONEST and grade.score == pytest.approx(HONEST_SCORE)
    assert "llm_ids_repaired" not in grade.flags
    request = llm.requests[0]
    ids, answer = prompt_parts(request)
    assert ids == SHORT_IDS and answer == ANSWER
    # max_tokens is budgeted per point and misconception, not the 2,048 cap
    assert request["max_tokens"] == output_budget(N_POINTS, N_WRONG) < 2048
    schema = request["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["key_points"]["items"]["properties"]["id"]["enum"] == SHORT_IDS
    assert schema["properties"]["key_points"]["minItems"] == N_POINTS


# ------------------------------------------------- 1. numbered ids, partial ids, unknown ids


def test_numbered_ids_are_matched_by_position_and_flagged(service, llm, entry):
    data = json.loads(reply([str(i) for i in range(1, N_POINTS + 1)]))
    wrong = "GRPO 的 baseline 是 critic 网络输出的状态价值，和 PPO 一样。"
    data["misconceptions"] = [{"id": "1", "evidence": "baseline 是 critic 网络输出的状态价值"}]
    llm.script(("reply", json.dumps(data, ensure_ascii=False)))
    grade = service.grade(entry, ANSWER + wrong, GraderChoice.llm)
    assert grade.grader.startswith("llm:")  # was 0.0 with no flag: ids looked up by name only
    assert covered(grade) == HONEST
    assert [m.id for m in grade.misconceptions] == ["critic-baseline"]
    assert "llm_ids_repaired" in grade.flags
    assert len(llm.requests) == 1


def test_point_text_as_id_is_matched_when_unambiguous(service, llm, entry):
    texts = [kp.text for kp in entry.rubric.key_points]
    llm.script(("reply", reply(texts)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert covered(grade) == HONEST and "llm_ids_repaired" in grade.flags


def test_partial_ids_get_a_repair_request_naming_what_is_missing(service, llm, entry):
    llm.script(("reply", reply(SHORT_IDS[:2])), ("reply", reply(SHORT_IDS)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.grader.startswith("llm:") and covered(grade) == HONEST
    first, second = (r["messages"][-1]["content"] for r in llm.requests)
    assert first != second  # not the identical temperature-0 request again
    assert "no verdict for " + ", ".join(SHORT_IDS[2:]) in second


def test_ids_matching_nothing_fall_back_flagged_malformed(service, llm, entry, caplog):
    bad = reply([chr(ord("a") + i) for i in range(N_POINTS)])
    llm.script(("reply", bad), ("reply", bad))
    with caplog.at_level(logging.DEBUG, logger="server.grading.llm_grader"):
        grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.grader == "rubric-fallback"
    assert grade.fallback_reason == "llm_malformed" and "not in the rubric" in grade.fallback_detail
    assert {"llm_fallback", "llm_malformed"} <= set(grade.flags)
    assert "原因：模型的回复无法解析为评分" in grade.feedback
    raw = [r for r in caplog.records if r.levelno == logging.DEBUG and "raw LLM reply" in r.message]
    assert len(raw) == 2 and '"id": "a"' in raw[0].message  # the raw reply, logged at debug


def test_partial_ids_twice_fall_back_instead_of_a_silent_zero(service, llm, entry):
    llm.script(("reply", reply(SHORT_IDS[:3])), ("reply", reply(SHORT_IDS[:3])))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.fallback_reason == "llm_malformed" and grade.score > 0


# -------------------------------------------------------------------- 4. tag in the quotes


def test_candidate_answer_tag_in_a_quote_is_stripped_before_checking(service, llm, entry):
    tagged = {k: f"<candidate_answer>\n{v}" for k, v in QUOTES.items()}
    tagged["replaces-critic"] = "“这样就不需要 critic</candidate_answer>”"
    data = {"key_points": points(SHORT_IDS, tagged), "misconceptions": [], "feedback": ""}
    llm.script(("reply", json.dumps(data, ensure_ascii=False)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert covered(grade) == HONEST
    assert "unverified_evidence" not in grade.flags


# ----------------------------------------------------------- 2. overlong output, max_tokens


def rambling_reply() -> str:
    """What a small model did without max_tokens: the whole answer copied as evidence, many
    times over (500-900 output tokens)."""
    long_quote = ANSWER * 6
    data = {
        "key_points": [{"id": i, "evidence": long_quote, "covered": True} for i in SHORT_IDS],
        "misconceptions": [],
        "feedback": "回答正确。" * 50,
    }
    return json.dumps(data, ensure_ascii=False)


def test_overlong_output_is_cut_at_max_tokens_then_repaired(service, llm, entry):
    assert scripted_tokens(rambling_reply()) > output_budget(N_POINTS, N_WRONG)
    llm.script(("budget", rambling_reply()), ("budget", reply(SHORT_IDS)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert all(r["max_tokens"] == output_budget(N_POINTS, N_WRONG) for r in llm.requests)
    assert grade.grader.startswith("llm:") and covered(grade) == HONEST
    assert "cut off at the" in llm.requests[1]["messages"][-1]["content"]


def test_truncated_json_twice_falls_back_as_malformed(service, llm, entry):
    llm.script(("budget", rambling_reply()), ("budget", rambling_reply()))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.fallback_reason == "llm_malformed" and "cut off" in grade.fallback_detail


def test_the_whole_answer_quoted_for_every_point_earns_nothing(service, llm, entry):
    whole = {k: ANSWER for k in QUOTES}
    data = {"key_points": points(SHORT_IDS, whole), "misconceptions": [], "feedback": ""}
    llm.script(("reply", json.dumps(data, ensure_ascii=False)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    # ANSWER is 2 sentences: one span claimed for four points is a dodge, and stays one
    assert not covered(grade) and "reused_evidence" in grade.flags


# --------------------------------------------------------- 2./3. slow trickle, cancellation


def test_slow_trickle_hits_the_deadline_and_the_abandoned_call_is_closed(service, llm, entry):
    # One byte per 0.3 s: ~6 minutes for the reply. The serial server, like llama.cpp with one
    # slot, cannot serve the next request until this one's connection is closed.
    llm.script(("trickle", 0.3, reply(SHORT_IDS)), ("reply", reply(SHORT_IDS)))
    first = service.grade(entry, ANSWER, GraderChoice.llm)
    assert first.grader == "rubric-fallback" and first.fallback_reason == "llm_timeout"
    assert len(llm.requests) == 1  # a timeout is not retried: the model is slow, not wrong
    second = service.grade(entry, ANSWER, GraderChoice.llm)
    # The next answer is graded by the model: the abandoned request did not hold the slot.
    assert second.grader.startswith("llm:") and covered(second) == HONEST
    assert llm.dropped >= 1


def test_the_grade_deadline_bounds_every_attempt_together(llm, entry):
    service = make_service(llm, llm_timeout_seconds=30, llm_grade_deadline_seconds=4)
    llm.script(("trickle", 0.3, reply(SHORT_IDS)), ("reply", reply(SHORT_IDS)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.fallback_reason == "llm_timeout"


# ---------------------------------------------------------------------- 2. context overflow


def compute_reply(body: dict) -> str:
    ids, _ = prompt_parts(body)
    return reply(ids)


LONG_ANSWER = ANSWER + "".join(
    f"第{i}点补充：组内的每条回答都用同一个基线，这一段是为了让回答变长而写的说明。"
    for i in range(120)
)


def test_a_context_the_full_prompt_overflows_is_rejected_by_the_server(llm, entry):
    # The check the next tests rely on: the unsized prompt really does not fit 2,048 tokens.
    service = make_service(llm, llm_context_tokens=32_000)
    llm.script(("context", 2048, reply(SHORT_IDS)), ("context", 2048, reply(SHORT_IDS)))
    grade = service.grade(entry, LONG_ANSWER, GraderChoice.llm)
    assert grade.fallback_reason == "llm_context_overflow"
    assert "exceeds the available context size" in grade.fallback_detail
    assert len(llm.requests) == 1  # the same prompt again cannot fit either


def test_small_context_trims_the_rubric_before_the_answer(llm, entry):
    service = make_service(llm, llm_context_tokens=1400)
    answer = ANSWER * 3
    llm.script(("context", 1400, compute_reply))
    plan = service.llm.plan(entry, answer, "zh")
    assert "reference_dropped" in plan.trimmed and not plan.answer_cut
    grade = service.grade(entry, answer, GraderChoice.llm)
    _, sent_answer = prompt_parts(llm.requests[0])
    assert sent_answer == answer  # the whole answer went out
    assert grade.grader.startswith("llm:")


def test_small_context_long_answer_fits_by_cutting_the_answer_last(llm, entry):
    service = make_service(llm, llm_context_tokens=2048)
    plan = service.llm.plan(entry, LONG_ANSWER, "zh")
    assert plan.answer_cut and plan.trimmed[-1] == "answer_cut"
    assert {"reference_dropped", "misconceptions_dropped", "points_dropped"} <= set(plan.trimmed)
    llm.script(("context", 2048, compute_reply))
    grade = service.grade(entry, LONG_ANSWER, GraderChoice.llm)
    request = llm.requests[0]
    prompt = sum(scripted_tokens(m["content"]) for m in request["messages"])
    assert prompt + request["max_tokens"] <= 2048  # the request fits the model's context
    assert grade.grader.startswith("llm:")
    assert {"llm_answer_cut", "llm_rubric_trimmed"} <= set(grade.flags)
    # points left out of the prompt are judged offline, not zeroed
    sent = set(prompt_parts(request)[0])
    assert len(sent) < N_POINTS and len(grade.key_points) == N_POINTS


def test_the_issues_8000_character_answer_fits_an_8192_token_context(llm, entry):
    answer = (LONG_ANSWER * 3)[:8000]  # the longest answer the API accepts
    service = make_service(llm, llm_context_tokens=8192)
    llm.script(("context", 8192, compute_reply))
    grade = service.grade(entry, answer, GraderChoice.llm)
    request = llm.requests[0]
    prompt = sum(scripted_tokens(m["content"]) for m in request["messages"])
    assert prompt + request["max_tokens"] <= 8192
    assert grade.grader.startswith("llm:") and grade.fallback_reason is None


def test_a_context_too_small_for_any_prompt_falls_back_without_a_call(llm, entry):
    service = make_service(llm, llm_context_tokens=600)
    llm.script()
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.fallback_reason == "llm_context_overflow" and llm.requests == []


# ------------------------------------------------------------------ 4. feedback language


def test_english_comment_on_a_chinese_answer_gives_chinese_feedback(service, llm, entry):
    llm.script(("reply", reply(SHORT_IDS, feedback="The answer correctly explains the baseline.")))
    grade = service.grade(entry, ANSWER, GraderChoice.llm, language="en")
    assert "correctly" not in grade.feedback
    assert "已覆盖" in grade.feedback and "遗漏" in grade.feedback
    assert "Covered" not in grade.feedback


def test_english_answer_gets_english_feedback(service, llm, entry):
    answer = (
        "Sample a group of G responses for the same prompt; the baseline is the group mean "
        "reward, and the advantage is divided by the group std: A_i = (r_i - mean) / (std + eps)."
    )
    quotes = {"group-mean": "the baseline is the group mean reward"}
    data = {
        "key_points": points(SHORT_IDS, quotes),
        "misconceptions": [],
        "feedback": "Right about the mean; the critic is not discussed.",
    }
    llm.script(("reply", json.dumps(data)))
    grade = service.grade(entry, answer, GraderChoice.llm, language="zh")
    assert grade.feedback.startswith("Right about the mean")
    assert "Covered:" in grade.feedback and "已覆盖" not in grade.feedback


def test_praise_above_a_low_score_is_dropped(service, llm, entry):
    data = {
        "key_points": points(SHORT_IDS, {}),
        "misconceptions": [],
        "feedback": "回答正确地解释了组内基线，非常全面。",
    }
    llm.script(("reply", json.dumps(data, ensure_ascii=False)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.score < 5 and "正确地解释" not in grade.feedback
    assert grade.feedback.startswith("遗漏")


# --------------------------------------------- 5. a quote must support the point, not just exist


def test_a_real_quote_from_a_wrong_sentence_earns_nothing(service, llm, entry):
    answer = "对同一个 prompt 采样一组 G 条回答。baseline 取整个 batch 的平均奖励作为 baseline。"
    quotes = {
        "group-sampling": "对同一个 prompt 采样一组 G 条回答",
        "group-mean": "baseline 取整个 batch 的平均奖励作为 baseline",
    }
    data = {"key_points": points(SHORT_IDS, quotes), "misconceptions": [], "feedback": ""}
    llm.script(("reply", json.dumps(data, ensure_ascii=False)))
    grade = service.grade(entry, answer, GraderChoice.llm)
    assert covered(grade) == ["group-sampling"]
    assert "contradicted_evidence" in grade.flags


def test_a_quote_sharing_only_a_topic_word_with_the_point_earns_nothing(service, llm, entry):
    # A model that marks every point covered quotes a sentence per point; this one shares only
    # "奖励" (a word of every RL answer) with the degenerate-groups point.
    extra = "奖励模型的训练需要大量人类偏好数据。"
    quotes = {**QUOTES, "degenerate-groups": extra.rstrip("。")}
    data = {"key_points": points(SHORT_IDS, quotes), "misconceptions": [], "feedback": ""}
    llm.script(("reply", json.dumps(data, ensure_ascii=False)))
    grade = service.grade(entry, ANSWER + extra, GraderChoice.llm)
    assert covered(grade) == HONEST and "unsupported_evidence" in grade.flags


# ------------------------------------------------------- retry only when the request changes


def test_a_provider_refusing_the_schema_is_asked_again_without_it(llm, entry):
    service = make_service(llm, llm_response_format="json_schema")
    llm.script(("status", 400), ("reply", reply(SHORT_IDS)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert grade.grader.startswith("llm:")
    assert "response_format" in llm.requests[0] and "response_format" not in llm.requests[1]


# ------------------------------------- `sparring eval grading --grader llm`: fallbacks by reason


def test_eval_grading_with_the_llm_reports_fallbacks_by_reason(llm, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    qid = "grpo-advantage-baseline"
    rows = [
        ("excellent", 8.5, ANSWER),
        ("weak", 3.0, "GRPO 的 baseline 就是组内的平均奖励。"),
        ("offtopic", 0.5, "我周末喜欢打篮球，也经常看电影放松一下。"),
        ("good", 6.0, "一组回答的奖励减去组内均值再除以标准差，不需要 critic。"),
    ]
    dataset = tmp_path / "small.jsonl"
    dataset.write_text(
        "\n".join(
            json.dumps(
                {"question_id": qid, "kind": k, "label": lab, "answer": a}, ensure_ascii=False
            )
            for k, lab, a in rows
        ),
        encoding="utf-8",
    )
    llm.script(
        ("compute", compute_reply),  # graded by the model
        ("reply", "I think it deserves 7/10."),  # malformed, then malformed again after repair
        ("reply", '```json\n{"score": 7}\n```'),
        ("trickle", 0.3, reply(SHORT_IDS)),  # no complete reply in time
        ("status", 401),  # the provider refuses the key: not retried
    )
    env = {
        **os.environ,
        "SPARRING_LLM_MODEL": "openai/scripted-grader",
        "SPARRING_LLM_API_BASE": llm.base_url,
        "SPARRING_LLM_API_KEY": "test-key",
        "SPARRING_LLM_TIMEOUT_SECONDS": "6",
        "SPARRING_SANDBOX_ENABLED": "false",
        "COLUMNS": "200",
    }
    sparring = Path(sys.executable).parent / "sparring"
    done = subprocess.run(
        [
            str(sparring),
            "eval",
            "grading",
            "--grader",
            "llm",
            "--split",
            "all",
            "--dataset",
            str(dataset),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert (
        "LLM grades: 7 graded; by the model 1, fell back to the rubric grader 3 "
        "(llm_malformed 1, llm_timeout 1, llm_provider_error 1), no model call 3" in out
    ), out
    assert "fallback: llm_timeout" in out and "fallback: llm_provider_error" in out
    assert len(llm.requests) == 5


# ----------------------------------------------- streamed replies (SPARRING_LLM_STREAM=true)


def test_a_streamed_reply_is_graded(llm, entry):
    service = make_service(llm, llm_stream=True)
    llm.script(("sse", 0, reply(SHORT_IDS)))
    grade = service.grade(entry, ANSWER, GraderChoice.llm)
    assert llm.requests[0]["stream"] is True
    assert grade.grader.startswith("llm:") and covered(grade) == HONEST


def test_a_slow_stream_is_closed_at_the_deadline_and_frees_the_slot(llm, entry):
    service = make_service(llm, llm_stream=True)
    # ~1,000 characters in 8-character chunks every 0.3 s: about 40 s to finish.
    llm.script(("sse", 0.3, reply(SHORT_IDS)), ("sse", 0, reply(SHORT_IDS)))
    first = service.grade(entry, ANSWER, GraderChoice.llm)
    assert first.fallback_reason == "llm_timeout"
    second = service.grade(entry, ANSWER, GraderChoice.llm)
    assert second.grader.startswith("llm:") and covered(second) == HONEST
    assert llm.dropped >= 1


def test_llm_log_level_debug_prints_the_raw_reply_to_stderr(llm, entry, capfd):
    logger = logging.getLogger("server.grading.llm_grader")
    try:
        service = make_service(llm, llm_log_level="DEBUG")
        llm.script(("reply", "certainly! 9/10"), ("reply", reply(SHORT_IDS)))
        grade = service.grade(entry, ANSWER, GraderChoice.llm)
        err = capfd.readouterr().err
    finally:  # the handler is process-wide: leave the logger as it was for other tests
        logger.handlers = [h for h in logger.handlers if not getattr(h, "sparring_llm", False)]
        logger.setLevel(logging.NOTSET)
    assert grade.grader.startswith("llm:")
    assert "raw LLM reply for grpo-advantage-baseline: 'certainly! 9/10'" in err
    assert "LLM grade request: model=openai/scripted-grader" in err
