"""A correct `compute_gae` for the coding tests, under any signature the test wants to try."""

from __future__ import annotations

GAE_SIGNATURE = "compute_gae(rewards, values, dones, gamma, lam)"
GAE_PARAMS = ["rewards", "values", "dones", "gamma", "lam"]
GAE_BODY = """
    adv = np.zeros(len(rewards))
    running = 0.0
    for t in reversed(range(len(rewards))):
        alive = 1.0 - dones[t]
        delta = rewards[t] + gamma * values[t + 1] * alive - values[t]
        running = delta + gamma * lam * alive * running
        adv[t] = running
    return adv
"""


def gae_code(signature: str = GAE_SIGNATURE, body: str = GAE_BODY) -> str:
    return f"import numpy as np\n\ndef {signature}:{body}"


def gae_answer(signature: str = GAE_SIGNATURE, body: str = GAE_BODY) -> str:
    """The code in a fenced block between two sentences of prose, as a candidate writes it."""
    return (
        "GAE 从后往前递推，先算 TD 残差 δ_t，再做 (γλ) 的指数加权和：\n\n```python\n"
        f"{gae_code(signature, body)}```\n"
        "λ=0 退化成单步 TD，λ=1 是 MC 回报减 V，用 λ 权衡偏差和方差。"
    )
