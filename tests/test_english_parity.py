"""English mode is English (issue #27): an English interview through /api/sessions and through the
chat endpoint has no Chinese in any interviewer line (topic names, leads, probes, hints, feedback,
the end report); the report shows the English reference where the bank has one and says so where
it does not; flags and statuses read as words in both languages; test failure reasons follow the
session language; `/?lang=en` keeps its query on the way to the UI; the favicon exists."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from server.grading.segments import split_segments
from server.interview.labels import FLAG_WORDS, failure_reason, flag_word
from tests.conftest import client_for, token_for

CJK = re.compile(r"[\u3400-\u9fff\u3000-\u303f\uff01-\uff5e]")
WEAK_EN = "I am not sure; something about sampling, I think."
RAW_CODES = ("probe_skipped", "unanswered", "hint_used", "off_topic", "code_error", "no_code")


def cjk_in(text: str) -> list[str]:
    return CJK.findall(text)


def interviewer_lines(state: dict) -> list[str]:
    return [t["text"] for t in state["turns"] if t["role"] == "interviewer"]


@pytest.mark.parametrize("topics", [["grpo"], ["ppo", "reward"]])
def test_an_english_interview_over_the_sessions_api_has_no_chinese(base_url, services, topics):
    with client_for(base_url, "dave") as c:
        r = c.post(
            "/api/sessions",
            json={"mode": "practice", "num_questions": 3, "language": "en", "seed": 5,
                  "topics": topics},
        )  # fmt: skip
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        said: list[str] = [r.json()["question"]["prompt"]]
        hint = c.post(f"/api/sessions/{sid}/hint").json()
        said.append(hint["hint"])
        for _ in range(12):
            body = c.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK_EN}).json()
            said += [body["grade"]["feedback"], body["next"]["prompt"]]
            if body["next"]["kind"] == "end":
                break
            if body["next"]["kind"] == "probe":
                skipped = c.post(f"/api/sessions/{sid}/skip").json()
                said += [skipped["grade"]["feedback"], skipped["next"]["prompt"]]
                if skipped["next"]["kind"] == "end":
                    break
        c.post(f"/api/sessions/{sid}/end")
        state = c.get(f"/api/sessions/{sid}").json()
        lines = interviewer_lines(state) + said
        leaks = {line: cjk_in(line) for line in lines if cjk_in(line)}
        assert not leaks, leaks
        # A topic name is in every question line, in English.
        assert any("(" in line and "Question 1" in line for line in lines)

        report = c.get(f"/api/sessions/{sid}/report").json()
        md = c.get(f"/api/sessions/{sid}/report", params={"format": "md", "lang": "en"}).text
    for code in RAW_CODES:
        assert code not in md, f"raw code {code} in the English report"
    for q in report["questions"]:
        entry = services.bank.get(q["entry_id"])
        heading_at = md.index(f"### {q['number']}. ")
        section = md[heading_at:].split("\n### ")[0]
        english = entry.rubric.reference_answer_en
        assert q["reference_answer_en"] == (english or None)
        if english:
            # The English reference is shown, and everything the report says is English.
            # (Markdown escapes such as "1\)" aside: the report renders bank text as Markdown)
            assert english.split("\n")[0].strip()[:30] in section.replace("\\", "")
            assert not cjk_in(section), (q["entry_id"], cjk_in(section)[:10])
        else:
            assert "no English reference yet" in section
            before_reference = section.split("<details>")[0]
            assert not cjk_in(before_reference), (q["entry_id"], before_reference[:400])


def test_an_english_chat_interview_has_no_chinese_in_any_reply(base_url, services):
    oai = openai.OpenAI(base_url=f"{base_url}/v1", api_key=token_for("erin"), max_retries=0)
    history: list[dict] = []
    replies = []
    for text in ["start, 3 questions, grpo, seed=11", "/hint", WEAK_EN, "/skip", WEAK_EN,
                 "/followup", WEAK_EN, WEAK_EN, WEAK_EN, WEAK_EN, WEAK_EN, "/end"]:  # fmt: skip
        history.append({"role": "user", "content": text})
        reply = oai.chat.completions.create(model="sparring-practice-en", messages=history)
        content = reply.choices[0].message.content
        history.append({"role": "assistant", "content": content})
        replies.append(content)
        if "Overall:" in content:
            break
    assert any("Overall:" in r for r in replies), replies[-1]
    leaks = {r[:120]: cjk_in(r) for r in replies if cjk_in(r)}
    assert not leaks, leaks


def test_topic_names_in_english_lines_come_from_the_topic_table(services):
    names = services.topic_names
    line = services.phrasing.say("en", "question", number=2, topic="GRPO优势基线", text="Why?")
    assert line == f"All right, next one. Question 2 ({names.topic('GRPO优势基线', 'en')}): Why?"
    assert "GRPO优势基线" in services.phrasing.say("zh", "question", number=2, topic="GRPO优势基线",
                                                  text="为什么？")  # fmt: skip


def test_flags_and_statuses_read_as_words_in_both_languages():
    assert set(FLAG_WORDS["zh"]) == set(FLAG_WORDS["en"])
    for code in RAW_CODES:
        for lang in ("zh", "en"):
            word = flag_word(code, lang)
            assert "_" not in word and word != code
    assert flag_word("probe_skipped", "zh") == "跳过了追问"
    assert flag_word("something_new", "en") == "something new"


def test_a_chinese_report_says_why_a_test_failed_in_chinese():
    assert (
        failure_reason("wrong values (max abs error 0.5)", "zh") == "数值不对（最大绝对误差 0.5）"
    )
    assert failure_reason("return value 2: shape [3], expected [4]", "zh") == (
        "第 2 个返回值：形状是 [3]，应为 [4]"
    )
    assert failure_reason("no function named compute_gae was defined", "zh") == (
        "没有定义名为 compute_gae 的函数"
    )
    assert failure_reason("timed out after 5 s (infinite loop?)", "zh").startswith("运行超过 5 秒")
    assert failure_reason("ValueError: bad (line 3 of your code)", "zh") == (
        "ValueError: bad（你的代码第 3 行）"
    )
    assert failure_reason("wrong values (max abs error 0.5)", "en") == (
        "wrong values (max abs error 0.5)"
    )


def test_a_skip_is_labelled_differently_on_each_side(base_url):
    with client_for(base_url, "dave") as c:
        r = c.post("/api/sessions", json={"mode": "practice", "num_questions": 2, "seed": 3})
        sid = r.json()["id"]
        c.post(f"/api/sessions/{sid}/skip")
        turns = c.get(f"/api/sessions/{sid}").json()["turns"]
    skips = {t["role"]: t["labels"] for t in turns if t["kind"] == "skip"}
    assert skips["candidate"]["zh"] != skips["interviewer"]["zh"]
    assert skips["candidate"]["en"] == "Q1 · You skipped"
    assert skips["interviewer"]["zh"] == "第 1 题 · 已跳过"


def test_root_keeps_its_query_on_the_way_to_the_ui_and_the_favicon_exists(base_url):
    r = httpx.get(f"{base_url}/?lang=en", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui/?lang=en"
    assert httpx.get(f"{base_url}/", follow_redirects=False).headers["location"] == "/ui/"
    icon = httpx.get(f"{base_url}/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")


def test_a_title_or_abbreviation_does_not_end_a_sentence():
    texts = [s.text for s in split_segments("Dr. Sutton showed it, e.g. with GAE. It works.")]
    assert texts == ["Dr. Sutton showed it, e.g. with GAE.", "It works."]
    assert [s.text for s in split_segments("Schulman et al. use it. Next.")] == [
        "Schulman et al. use it.",
        "Next.",
    ]
