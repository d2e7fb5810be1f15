"""Every string the UI shows, in zh and en, and API errors turned into sentences with what to do."""

from __future__ import annotations

from datetime import datetime

from server.interview.labels import flag_word

T: dict[str, dict[str, str]] = {
    "zh": {
        "title": "# Sparring · RL / 后训练模拟面试",
        "setup": "设置",
        "interview": "面试",
        "report": "报告",
        "history": "历史",
        "mode": "模式",
        "companies": "公司",
        "topics": "主题（括号里是题数）",
        "difficulty": "难度",
        "duration": "时长（分钟）",
        "questions": "题目数",
        "language": "面试官语言",
        "grader": "评分器",
        "start": "开始面试",
        "answer": "你的回答（Ctrl+Enter 提交）",
        "code": "代码（Python，Tab 缩进）",
        "contract": "要实现的函数",
        "submit": "提交回答",
        "related": "换个相关问题",
        "hint": "提示（每次满分 −2.5）",
        "skip": "跳过",
        "end": "结束面试",
        "end_confirm": "确认结束？再点一次",
        "clarify": "问面试官（不计分）",
        "ask_first": "请先在回答框里写下你想问面试官的问题（比如题目的范围或符号），再点“问面试官”。",
        "stale": "这场面试在另一个标签页里已经往下走了（你看到的不是最新的问题）。已刷新为最新进度，你的草稿还在，请看过最新问题后再提交。",
        "review_title": "逐题复盘",
        "review_hint": "点开每道题，查看每个要点的 ✓/✗ 和依据、错误说法及更正、隐藏测试、问过的追问和参考答案。",
        "report_empty": "还没有报告：在“设置”页开始一场面试，结束后这里会显示总分、各领域得分和逐题复盘。",
        "report_running": "面试进行中：结束后这里会显示报告（在“面试”页点“结束面试”可提前结束）。",
        "ref_zh_only": "（这道题还没有英文参考答案，下面是中文版。）",
        "resume": "继续或结束",
        "reference": "参考答案",
        "reference_for": "参考答案 · {label}",
        "reference_wait": "参考答案会在本题（含追问）结束后显示。",
        "download": "下载 Markdown 报告",
        "refresh": "刷新历史",
        "untimed": "不计时",
        "left": "剩余",
        "time_up": "时间到，面试已结束",
        "score": "得分",
        "feedback": "反馈",
        "tests": "隐藏测试通过",
        "no_session": "还没有进行中的面试，请在“设置”页开始。",
        "type_first": "请先输入回答（文字或代码）。",
        "voice": "语音回答（录音或上传音频）",
        "voice_send": "发送语音回答",
        "record_first": "请先录音或上传一段音频。",
        "llm_yes": "已配置 LLM：{model}",
        "llm_no": "未配置 LLM，使用离线评分标准（rubric）评分。",
        "mode_interview": "计时面试",
        "mode_practice": "自由练习",
        "mode_review": "弱项复习",
        "lang_zh": "中文",
        "lang_en": "English",
        "grader_auto": "自动",
        "grader_rubric": "评分标准（离线）",
        "grader_llm": "LLM",
        "overall": "总分 {score} / 10 · {status}",
        "status_ended": "已结束",
        "status_active": "进行中",
        "reason_time": "时间到",
        "reason_done": "题目答完",
        "reason_exhausted": "题库用尽",
        "reason_manual": "手动结束",
        "col_num": "#",
        "col_question": "题目",
        "col_score": "得分",
        "col_covered": "答到",
        "col_missed": "漏掉的要点",
        "col_tests": "测试",
        "axis_topic": "领域",
        "axis_score": "得分（0–10）",
        "axis_mastery": "掌握度（0–10）",
        "axis_session": "场次",
        "area_prefix": "领域",
        "sessions_title": "### 历次面试",
        "mastery_title": "### 各领域掌握度",
        "trend_title": "### 趋势",
        "trend_wait": "完成两场以上后显示趋势。",
        "queue_title": "### 复习队列",
        "col_when": "时间",
        "col_mode": "模式",
        "col_status": "状态",
        "col_count": "题数",
        "col_avg": "平均分",
        "col_open": "报告",
        "open_report": "打开报告",
        "col_area": "领域",
        "col_due": "到期",
        "col_due_now": "现在该复习",
        "col_last": "上次得分",
        "yes": "是",
        "no": "否",
        "no_history": "还没有记录：完成一场面试后这里会显示进度。",
        "filter_all": "题库共 {n} 道题。",
        "filter_company": "{companies} 共有 {n} 道题，主题列表只显示这些公司问过的。",
        "filter_missing": "{companies} 没有问过：{missing}。可选的主题有：{available}。",
        "skipped": "（跳过）",
        "late": "（超时提交）",
        "bank": "题库",
        "search": "搜索题库（中文或英文）",
        "search_btn": "搜索",
        "relevance": "相关度",
        "supplementary": "补充题（依据论文编写）",
        "match_none": "题库里没有相近的题——最接近的主题：{topics}",
        "match_weak": "只找到部分相关的题：",
        "no_results": "没有结果。",
    },
    "en": {
        "title": "# Sparring · RL / post-training mock interviews",
        "setup": "Setup",
        "interview": "Interview",
        "report": "Report",
        "history": "History",
        "mode": "Mode",
        "companies": "Companies",
        "topics": "Topics (question count in brackets)",
        "difficulty": "Difficulty",
        "duration": "Duration (minutes)",
        "questions": "Questions",
        "language": "Interviewer language",
        "grader": "Grader",
        "start": "Start interview",
        "answer": "Your answer (Ctrl+Enter submits)",
        "code": "Code (Python, Tab indents)",
        "contract": "Function to write",
        "submit": "Submit answer",
        "related": "Related question",
        "hint": "Hint (max −2.5 each)",
        "skip": "Skip",
        "end": "End interview",
        "end_confirm": "Really end? Click again",
        "clarify": "Ask the interviewer (not graded)",
        "ask_first": "Type your question for the interviewer in the answer box first (scope, "
        "notation), then press “Ask the interviewer”.",
        "stale": "This interview moved on in another tab (what you saw was not the latest "
        "question). The page now shows the latest state; your draft is kept — read the new "
        "question, then submit.",
        "review_title": "Question by question",
        "review_hint": "Open a question to see each point ✓/✗ with its evidence, wrong claims "
        "with corrections, hidden tests, the follow-ups asked and the reference answer.",
        "report_empty": "No report yet: start an interview on Setup; when it ends, its overall "
        "score, per-area scores and a question-by-question review show here.",
        "report_running": "An interview is running: its report shows here once it ends (End "
        "interview on the Interview tab ends it now).",
        "ref_zh_only": "(This question has no English reference answer yet; the Chinese one "
        "follows.)",
        "resume": "Resume or end",
        "reference": "Reference answer",
        "reference_for": "Reference answer · {label}",
        "reference_wait": "The reference answer shows once this question and its follow-ups are done.",
        "download": "Download Markdown report",
        "refresh": "Refresh history",
        "untimed": "untimed",
        "left": "left",
        "time_up": "Time is up; the interview is over",
        "score": "Score",
        "feedback": "Feedback",
        "tests": "Hidden tests passed",
        "no_session": "No interview is running; start one on the Setup screen.",
        "type_first": "Type an answer (text or code) first.",
        "voice": "Spoken answer (record or upload audio)",
        "voice_send": "Send spoken answer",
        "record_first": "Record or upload an audio clip first.",
        "llm_yes": "LLM configured: {model}",
        "llm_no": "No LLM configured: the offline rubric grader is used.",
        "mode_interview": "Timed interview",
        "mode_practice": "Practice",
        "mode_review": "Review weak topics",
        "lang_zh": "中文",
        "lang_en": "English",
        "grader_auto": "Automatic",
        "grader_rubric": "Rubric (offline)",
        "grader_llm": "LLM",
        "overall": "Overall {score} / 10 · {status}",
        "status_ended": "ended",
        "status_active": "running",
        "reason_time": "time is up",
        "reason_done": "all questions asked",
        "reason_exhausted": "no questions left",
        "reason_manual": "ended by you",
        "col_num": "#",
        "col_question": "Question",
        "col_score": "Score",
        "col_covered": "Covered",
        "col_missed": "Missed points",
        "col_tests": "Tests",
        "axis_topic": "Area",
        "axis_score": "Score (0–10)",
        "axis_mastery": "Mastery (0–10)",
        "axis_session": "Session",
        "area_prefix": "Area",
        "sessions_title": "### Past interviews",
        "mastery_title": "### Mastery per area",
        "trend_title": "### Trend",
        "trend_wait": "The trend shows after two or more sessions.",
        "queue_title": "### Review queue",
        "col_when": "When",
        "col_mode": "Mode",
        "col_status": "Status",
        "col_count": "Questions",
        "col_avg": "Average",
        "col_open": "Report",
        "open_report": "Open report",
        "col_area": "Area",
        "col_due": "Due",
        "col_due_now": "Due now",
        "col_last": "Last score",
        "yes": "yes",
        "no": "no",
        "no_history": "Nothing yet: your progress shows here after your first interview.",
        "filter_all": "The bank holds {n} questions.",
        "filter_company": "{companies}: {n} questions; the topic list shows only what they asked.",
        "filter_missing": "{companies} never asked about: {missing}. Topics you can pick: {available}.",
        "skipped": "(skipped)",
        "late": "(sent after time was up)",
        "bank": "Bank",
        "search": "Search the bank (Chinese or English)",
        "search_btn": "Search",
        "relevance": "relevance",
        "supplementary": "supplementary (written from the papers)",
        "match_none": "No close match in the bank — nearest topics: {topics}",
        "match_weak": "Only loosely related questions:",
        "no_results": "No results.",
    },
}

ERRORS: dict[str, dict[str, str]] = {
    "zh": {
        "session_ended": "这场面试已经结束。请到“报告”页查看结果，或在“设置”页开始新的面试。",
        "time_up": "时间到了，这场面试已结束。报告已经生成，请到“报告”页查看。",
        "no_questions": "没有符合这些条件的题目。{available}请放宽条件（公司、主题、难度）后再开始。",
        "no_followup": "这道题没有可换的相关问题了。请回答当前问题，或点“跳过”。",
        "grader_unavailable": "服务器没有配置 LLM。请选择评分器“自动”或“评分标准（离线）”。",
        "nothing_to_review": "还没有可复习的题目。先完成一场面试或练习，再来复习。",
        "not_found": "找不到这场面试（可能属于其他用户或数据已清空）。请在“设置”页开始新的面试。",
        "unreachable": "连不上 Sparring 服务器。请确认服务器正在运行，然后刷新页面重试。",
        "busy": "服务器正忙，请过几秒再试。",
        "answer_too_long": "回答太长了，请删减后再提交。",
        "question_removed": "这道题已不在题库里。请点“跳过”或开始新的面试。",
        "transcription_failed": "没听清，请再录一次或直接输入。",
        "transcription_timeout": "语音识别太慢，没有等到结果。请再录一次或直接输入。",
        "empty_transcript": "没听到说话内容，请靠近麦克风再录一次，或直接输入。",
        "empty_audio": "录音是空的，请再录一次。",
        "unsupported_audio": "不支持这种音频格式。请直接录音，或上传 wav、mp3、m4a、ogg、webm、flac 文件。",
        "speech_disabled": "服务器没有配置语音识别，请直接输入回答。",
        "body_too_large": "录音太长，超过了服务器的上传上限。请分段回答（每段半分钟以内），或直接输入。",
        "other": "出错了：{message}。请重试；如果一直出错，请刷新页面。",
    },
    "en": {
        "session_ended": "This interview has ended. See the Report tab, or start a new one on Setup.",
        "time_up": "Time is up and the interview is over. Your report is on the Report tab.",
        "no_questions": "No question matches these filters. {available}Widen them (companies, "
        "topics, difficulty) and start again.",
        "no_followup": "No related question is left for this one. Answer it, or press Skip.",
        "grader_unavailable": "No LLM is configured on the server. Choose the Automatic or "
        "Rubric grader.",
        "nothing_to_review": "Nothing to review yet. Finish an interview or a practice session "
        "first.",
        "not_found": "This interview cannot be found (another user's, or the data was reset). "
        "Start a new one on Setup.",
        "unreachable": "Cannot reach the Sparring server. Check that it is running, then reload.",
        "busy": "The server is busy; try again in a few seconds.",
        "answer_too_long": "The answer is too long; shorten it and submit again.",
        "question_removed": "This question is no longer in the bank. Skip it or start a new "
        "interview.",
        "transcription_failed": "Couldn't make that out. Record again or type your answer.",
        "transcription_timeout": "Speech recognition took too long. Record again or type your "
        "answer.",
        "empty_transcript": "No speech was heard. Move closer to the microphone and record "
        "again, or type your answer.",
        "empty_audio": "The recording is empty. Record again.",
        "unsupported_audio": "This audio format is not supported. Record in the browser, or "
        "upload a wav, mp3, m4a, ogg, webm or flac file.",
        "speech_disabled": "Speech recognition is not configured on the server. Type your answer.",
        "body_too_large": "The recording is larger than the server accepts. Answer in parts "
        "(under half a minute each), or type your answer.",
        "other": "Something went wrong: {message}. Try again; reload the page if it persists.",
    },
}


def lang_key(ui_lang: str | None) -> str:
    return "en" if ui_lang in ("English", "en") else "zh"


def tr(ui_lang: str | None) -> dict[str, str]:
    return T[lang_key(ui_lang)]


def error_sentence(code: str, status: int, message: str, ui_lang: str, available: str = "") -> str:
    errors = ERRORS[lang_key(ui_lang)]
    if status in (429, 503):
        return errors["busy"]
    if code in errors:
        return errors[code].format(available=available, message=message)
    if "too long" in message or code in ("answer_too_large", "too_large"):
        return errors["answer_too_long"]
    return errors["other"].format(message=message)


def readable_time(iso: str | None) -> str:
    """'2026-12-01 13:05 UTC' from an ISO timestamp (no microseconds, no 'T')."""
    if not iso:
        return "—"
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return when.strftime("%Y-%m-%d %H:%M") + (" UTC" if when.utcoffset() is not None else "")


def flag_text(flag: str, ui_lang: str) -> str:
    """A grade flag as words (the server's table, so the card, report and chat agree)."""
    return flag_word(flag, lang_key(ui_lang))


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
