"""Tokens for BM25: jieba words for Chinese, Latin terms kept whole (GRPO, PPO-clip, Bradley-Terry)."""

from __future__ import annotations

import logging
import re
import unicodedata
from functools import cache, lru_cache
from types import ModuleType

# Domain terms jieba would otherwise cut apart.
DOMAIN_WORDS = (
    "优势函数 重要性采样 奖励模型 奖励函数 价值模型 价值函数 策略梯度 熵坍塌 熵崩溃 冷启动 信用分配 "
    "偏好对 偏好数据 参考模型 拒绝采样 动态采样 蒙特卡罗 蒙特卡洛 马尔可夫 贝尔曼 折扣因子 模仿学习 "
    "多智能体 分层强化学习 过程奖励 结果奖励 奖励黑客 长度偏置 格式崩溃 灾难性遗忘 探索性 时序差分 "
    "信任域 裁剪 截断 离线 在线 同策略 异策略 对齐 人类反馈 正向KL 反向KL 交叉熵 "
    "奖励稀疏 稀疏奖励 监控指标 损失函数 目标函数 伪代码 手撕 轨迹 rollout引擎"
).split()

_LATIN_RE = re.compile(r"[a-z][a-z0-9]*(?:[-_./][a-z0-9]+)*\+*|\d+(?:\.\d+)?")
_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
STOPWORDS = frozenset(
    (
        "的 了 是 在 和 与 及 或 吗 呢 吧 啊 么 什么 怎么 怎样 如何 为什么 为何 哪些 哪个 有 有没有 "
        "一下 一个 这个 那个 这种 那种 中 里 里面 时 时候 会 能 能否 可以 要 需要 还 还是 就 都 也 "
        "对 对于 把 被 让 给 从 到 以及 并 其 之 请 讲 讲讲 说说 介绍 谈谈 具体 分别 哪 是否 "
        "the a an of to in on for and or is are be how what why which when does do with by as "
        "it its that this these those can you your from at into about explain describe"
    ).split()
)


@cache
def _jieba() -> ModuleType:
    """jieba with the domain words, loaded on the first Chinese text rather than at import: its
    dictionary takes seconds to build, and a starting server answers /healthz before it."""
    import jieba

    jieba.setLogLevel(logging.WARNING)
    for word in DOMAIN_WORDS:
        jieba.add_word(word, freq=20000)
    return jieba


def normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


@lru_cache(maxsize=4096)
def tokenize(text: str) -> tuple[str, ...]:
    text = normalise(text)
    tokens: list[str] = []
    for m in _LATIN_RE.finditer(text):
        term = m.group(0)
        tokens.append(term)
        parts = re.split(r"[-_./]", term)
        if len(parts) > 1:
            tokens.extend(p for p in parts if p)
    for run in _CJK_RE.findall(text):
        tokens.extend(w for w in _jieba().lcut_for_search(run) if w.strip())
    return tuple(t for t in tokens if t not in STOPWORDS)


def words_in_order(text: str) -> list[str]:
    """Every word of the text in reading order (stopwords kept), for phrase-like matching."""
    return [w for w in _jieba().lcut(normalise(text)) if w.strip()]
