"""Question routes through HTTP against the real app, bank, Chroma and embedding model."""

from __future__ import annotations

import pytest


def test_healthz(alice):
    r = alice.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_list_filters_and_pages(alice):
    r = alice.get("/api/questions", params={"limit": 1000})
    assert r.status_code == 200
    body = r.json()
    assert body["total"] >= 270 and len(body["results"]) == body["total"]
    assert {q["source"] for q in body["results"]} == {"seed", "supplementary"}
    assert "rubric" not in body["results"][0]
    grpo = alice.get("/api/questions", params={"topic": "grpo", "limit": 5, "offset": 2}).json()
    assert grpo["total"] > 20 and len(grpo["results"]) == 5
    assert all(q["area"] == "grpo" or q["topic"].lower() == "grpo" for q in grpo["results"])
    meituan = alice.get("/api/questions", params={"company": "美团"}).json()
    assert meituan["total"] > 0 and all(
        any("美团" in c for c in q["companies"]) for q in meituan["results"]
    )
    coding = alice.get("/api/questions", params={"type": "coding", "limit": 1000}).json()
    assert all(q["type"] == "coding" for q in coding["results"])


@pytest.mark.parametrize(
    "params",
    [{"limit": 0}, {"limit": 1001}, {"limit": "ten"}, {"offset": -1}, {"type": "poetry"}],
)
def test_list_rejects_bad_parameters(alice, params):
    r = alice.get("/api/questions", params=params)
    assert r.status_code == 422
    assert {"code", "message"} <= set(r.json()["error"])  # plus OpenAI's type and param


def test_get_one_with_and_without_rubric(alice):
    r = alice.get("/api/questions/grpo-advantage-baseline")
    assert r.status_code == 200 and "rubric" not in r.json()
    full = alice.get("/api/questions/grpo-advantage-baseline", params={"rubric": "true"}).json()
    assert len(full["rubric"]["key_points"]) >= 3
    missing = alice.get("/api/questions/no-such-question")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_search_finds_paraphrases_in_both_languages(alice):
    zh = alice.get(
        "/api/questions/search", params={"q": "GRPO 为啥不用 critic 也不用训练 RM", "k": 5}
    ).json()
    assert "grpo-no-value-model" in [h["id"] for h in zh["results"]]
    en = alice.get(
        "/api/questions/search", params={"q": "derive the DPO loss from Bradley-Terry", "k": 5}
    ).json()
    ids = [h["id"] for h in en["results"]]
    assert "dpo-loss-from-bradley-terry" in ids
    first = en["results"][0]
    assert set(first) >= {"id", "text", "text_en", "topic", "companies", "score", "relevance"}
    relevance = [h["relevance"] for h in en["results"]]
    assert relevance == sorted(relevance, reverse=True)


def test_search_hits_resolve_to_sub_questions(alice):
    r = alice.get("/api/questions/search", params={"q": "DQN 的伪代码怎么写", "k": 3}).json()
    top = r["results"][0]
    assert top["id"] == "dqn-pseudocode-td-loss"
    assert top["subquestion"]["id"].startswith("dqn-pseudocode-td-loss.")


def test_search_filters(alice):
    r = alice.get(
        "/api/questions/search", params={"q": "KL 散度", "k": 10, "company": "腾讯"}
    ).json()
    assert r["results"] and all(any("腾讯" in c for c in h["companies"]) for h in r["results"])
    r = alice.get("/api/questions/search", params={"q": "loss", "k": 10, "topic": "dpo"}).json()
    assert r["results"] and all(h["area"] == "dpo" for h in r["results"])


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"q": ""},
        {"q": "   "},
        {"q": "ppo", "k": 0},
        {"q": "ppo", "k": 51},
        {"q": "ppo", "k": "five"},
    ],
)
def test_search_rejects_bad_input(alice, params):
    r = alice.get("/api/questions/search", params=params)
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "invalid_request"


def test_unknown_route_is_json_404(alice):
    r = alice.get("/api/nothing-here")
    assert r.status_code == 404 and "error" in r.json()


def test_auth_is_required_when_tokens_are_configured(base_url):
    import httpx

    assert httpx.get(f"{base_url}/api/questions").status_code == 401
    bad = httpx.get(f"{base_url}/api/questions", headers={"Authorization": "Bearer wrong"})
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "unauthorized"


def test_search_results_say_where_an_entry_comes_from(alice):
    """Issue #25: the question-bank page shows the source (seed notes or supplementary)."""
    from ui.app import search_results

    found = alice.get("/api/questions/search", params={"q": "TD3 相比 DDPG 做了哪三个改进"}).json()
    sources = {r["id"]: r["source"] for r in found["results"]}
    assert sources.get("td3-three-tricks") == "supplementary", sources
    seed = alice.get("/api/questions/search", params={"q": "PPO 的 clip 是怎么起作用的"}).json()
    assert {r["source"] for r in seed["results"]} >= {"seed"}
    only_seed = {
        "results": [r for r in seed["results"] if r["source"] == "seed"],
        "match": "strong",
    }
    for lang, marker in (("中文", "补充题"), ("English", "supplementary")):
        line = next(x for x in search_results(found, {}, lang).splitlines() if "TD3" in x)
        assert marker in line, line
        assert marker not in search_results(only_seed, {}, lang)
