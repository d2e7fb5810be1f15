"""Find the Python code inside a free-text answer."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass

FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
CODE_START = re.compile(r"^(import |from \S+ import |def |class |@)")


def _is_code(block: str) -> bool:
    """A fenced block that is code to run (not a formula or a shell line in a fence)."""
    return "def " in block or "import " in block


def extract_code(answer: str) -> str | None:
    """The answer's code: its fenced blocks joined, else the longest run of lines from the first
    `import`/`def` that parses as Python. None when the answer holds no code."""
    blocks = [b.strip("\n") for b in FENCE.findall(answer) if _is_code(b)]
    if blocks:
        return "\n\n".join(blocks) + "\n"
    lines = answer.splitlines()
    start = next((i for i, line in enumerate(lines) if CODE_START.match(line)), None)
    if start is None:
        return None
    # Prose after the code ends it: drop trailing lines until what remains parses.
    for end in range(len(lines), start, -1):
        chunk = "\n".join(lines[start:end]) + "\n"
        if "def " not in chunk:
            break
        try:
            ast.parse(chunk)
        except SyntaxError:
            continue
        return chunk
    # Unparseable code is still code: the sandbox reports the syntax error to the candidate.
    return "\n".join(lines[start:]) + "\n"


def code_spans(answer: str) -> list[tuple[int, int]]:
    """Where the answer's code sits, as (start, end) offsets: fenced blocks, else the unfenced run."""
    spans = [m.span() for m in FENCE.finditer(answer)]
    if spans:
        return spans
    code = extract_code(answer)
    if code is None:
        return []
    start = answer.find(code.rstrip("\n"))
    return [(start, start + len(code.rstrip("\n")))] if start >= 0 else []


def code_notes(code: str) -> list[str]:
    """The comments and docstrings of a piece of code: the explanation written inside it."""
    notes: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                notes.append(token.string.lstrip("#").strip())
            elif token.type == tokenize.STRING and token.string.lstrip("rRbBuU")[:3] in (
                '"""',
                "'''",
            ):
                notes.append(token.string.lstrip("rRbBuU")[3:-3].strip())
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # broken code: the notes read before the break stand
    return [n for n in notes if n]


def explanation_text(answer: str) -> str:
    """The answer with each block of code replaced by its comments and docstrings, one per line.

    When hidden tests decide the code, the prose grader reads this instead of the answer, so the
    identifiers of code that fails its tests cannot evidence a key point (the tests credit what
    the code does, `code_grader`). Blocks without `def`/`import` (a formula in a fence) stay."""
    blocks = [
        (m.start(), m.end(), m.group(1)) for m in FENCE.finditer(answer) if _is_code(m.group(1))
    ]
    if not blocks and not FENCE.search(answer):
        blocks = [(start, end, answer[start:end]) for start, end in code_spans(answer)]
    parts: list[str] = []
    position = 0
    for start, end, code in blocks:
        parts += [answer[position:start], "\n", *(f"{n}\n" for n in code_notes(code))]
        position = end
    parts.append(answer[position:])
    return "".join(parts)


def uses_torch(code: str) -> bool:
    return re.search(r"^[ \t]*(import torch|from torch)", code, re.M) is not None


def _def_line(function: str) -> re.Pattern[str]:
    # [ \t], not \s: with re.M a \s* at each line start ran over every blank line below it
    # (quadratic on a run of newlines; issue 24).
    return re.compile(rf"^[ \t]*def[ \t]+{re.escape(function)}[ \t]*\(", re.M)


def defines(code: str, function: str) -> bool:
    return _def_line(function).search(code) is not None


def defining_line(code: str, function: str) -> str | None:
    """The `def` line of the function, a verbatim span of the answer used as evidence."""
    for line in code.splitlines():
        if _def_line(function).match(line):
            return line.strip()
    for line in code.splitlines():
        if line.lstrip().startswith("def "):
            return line.strip()
    return None


# ---------- matching the answer's function to the task's contract ----------

# Words that name the same argument: a candidate's `rews`, `reward` and `r` are the contract's
# `rewards`. Matched per token after lower-casing and dropping a plural "s"; a name maps to a
# contract parameter only when its tokens equal that parameter's, and only one parameter's.
TOKEN_SYNONYMS = {
    "logprob": "logp",
    "logpi": "logp",
    "lp": "logp",
    "logit": "logit",
    "adv": "advantage",
    "rew": "reward",
    "r": "reward",
    "val": "value",
    "v": "value",
    "terminal": "done",
    "terminated": "done",
    "lambda": "lam",
    "lambd": "lam",
    "lmbda": "lam",
    "lamda": "lam",
    "lamb": "lam",
    "discount": "gamma",
    "epsilon": "eps",
    "reference": "ref",
    "prob": "prob",
}
# Tokens that add nothing to an argument's identity ("new_logp" is the current policy's logp).
FILLER_TOKENS = {"new", "cur", "curr", "current", "policy", "pi", "theta", "batch", "t"}
# Function-name tokens too generic to say two functions are the same one.
GENERIC_NAME_TOKENS = {"compute", "calc", "calculate", "get", "my", "fn", "func", "loss", "the"}


def _tokens(name: str) -> tuple[str, ...]:
    # "log_probs", "log_p", "logprobs": one word, not log + prob
    joined = re.sub(r"log_?(probs?|ps?)(?=_|$)", "logp", name.lower())
    words = [w for w in re.split(r"_+", joined) if w]
    out = []
    for w in words:
        if len(w) > 3 and w.endswith("s"):
            w = w[:-1]
        w = TOKEN_SYNONYMS.get(w, w)
        if w not in FILLER_TOKENS:
            out.append(w)
    return tuple(sorted(out)) or (name.lower(),)


# Symbols a key point writes that code spells out.
_SYMBOL_WORDS = {"δ": "delta", "γ": "gamma", "λ": "lam", "π": "pi", "β": "beta", "ε": "eps"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[δγλπβε]")
_NOT_EVIDENCE = ("def ", "import ", "from ", "#", "@", "class ", '"""', "'''")


def _words(text: str) -> set[str]:
    return {
        w
        for ident in _IDENTIFIER.findall(text)
        for w in _tokens(_SYMBOL_WORDS.get(ident, ident))
        if len(w) > 1
    }


def point_line(code: str, point_texts: list[str], taken: set[str]) -> str | None:
    """The line of the code that best shows a key point its tests proved: the one sharing most
    words with the point's texts and aliases (δ → delta, γλ → gamma·lam), preferring a line no
    other point quotes. None when no line shares a word (the caller quotes the `def` line)."""
    words = _words(" ".join(point_texts))
    best, best_score = None, 0.0
    for line in code.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(_NOT_EVIDENCE):
            continue
        score = len(_words(stripped) & words) - (0.5 if stripped in taken else 0.0)
        if score > best_score:
            best, best_score = stripped, score
    return best


def _name_tokens(name: str) -> set[str]:
    return {w for w in re.split(r"_+", name.lower()) if w and w not in GENERIC_NAME_TOKENS}


@dataclass(frozen=True)
class CandidateFunction:
    name: str
    params: tuple[str, ...]  # positional parameters, in order
    required: int  # how many have no default
    varargs: bool
    calls: frozenset[str]  # names of the functions it calls

    def accepts(self, n: int) -> bool:
        return self.required <= n and (self.varargs or n <= len(self.params))

    @property
    def signature(self) -> str:
        return f"{self.name}({', '.join([*self.params, *(['*args'] if self.varargs else [])])})"


@dataclass(frozen=True)
class SignatureMatch:
    """How the hidden tests will call the answer's function, or why they cannot."""

    function: str | None  # the answer's function the tests call; None = no unambiguous match
    order: tuple[int, ...] = ()  # position j of the call receives the contract's argument order[j]
    exact: bool = True  # the contract's name and argument order, as written
    by_name: bool = True  # every argument was placed by its name (or the order is the contract's)
    found: str = ""  # the answer's signature, for feedback
    reason: str = ""  # why no match was made
    related: bool = False  # the function's name or arguments resemble the contract's

    @property
    def matched(self) -> bool:
        return self.function is not None


def top_level_functions(code: str) -> list[CandidateFunction] | None:
    """The module-level functions the code defines, or None when it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        positional = [a.arg for a in [*args.posonlyargs, *args.args]]
        calls = frozenset(
            n.func.id
            for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        )
        found.append(
            CandidateFunction(
                name=node.name,
                params=tuple(positional),
                required=len(positional) - len(args.defaults),
                varargs=args.vararg is not None,
                calls=calls,
            )
        )
    return found


def _argument_order(
    candidate: CandidateFunction, params: list[str], aliases: dict[str, list[str]]
) -> tuple[tuple[int, ...], int]:
    """Which contract argument goes to each of the candidate's first len(params) positions, and
    how many positions were decided by a name (the rest by position alone)."""
    n = len(params)
    if candidate.varargs and len(candidate.params) < n:
        return tuple(range(n)), 0
    slots = list(candidate.params[:n])
    keys: dict[tuple[str, ...], list[int]] = {}
    for i, p in enumerate(params):
        for name in [p, *aliases.get(p, [])]:
            keys.setdefault(_tokens(name), []).append(i)
    placed: dict[int, int] = {}  # candidate position → contract index
    for j, name in enumerate(slots):
        hits = sorted(set(keys.get(_tokens(name), [])))
        if len(hits) == 1 and hits[0] not in placed.values():
            placed[j] = hits[0]
    rest = iter(i for i in range(n) if i not in placed.values())
    order = tuple(placed[j] if j in placed else next(rest) for j in range(n))
    return order, len(placed)


def match_signature(
    code: str,
    function: str,
    params: list[str],
    aliases: dict[str, list[str]] | None = None,
    task_words: set[str] | None = None,
) -> SignatureMatch:
    """Match the answer's function to the contract: the contract's name first; otherwise the one
    function whose arity fits (preferring a related name, then the one no other function calls).
    Arguments are placed by name where names (or common synonyms) say which is which, the rest by
    position. Nothing runs here: the code is only parsed."""
    functions = top_level_functions(code)
    if functions is None:
        return SignatureMatch(function=None, reason="syntax")
    aliases = aliases or {}
    n = len(params)
    wanted = f"{function}({', '.join(params)})"
    related_words = _name_tokens(function) | (task_words or set())
    named = [f for f in functions if f.name == function]
    if named:
        chosen = named[-1]
        if not chosen.accepts(n):
            return SignatureMatch(
                function=None,
                found=chosen.signature,
                reason=f"{chosen.signature} cannot be called as {wanted}",
                related=True,
            )
    else:
        fitting = [f for f in functions if f.accepts(n)]
        if len(fitting) > 1:
            fitting = [f for f in fitting if _name_tokens(f.name) & related_words] or fitting
        if len(fitting) > 1:
            called = set().union(*(f.calls for f in fitting))
            fitting = [f for f in fitting if f.name not in called] or fitting
        if len(fitting) != 1:
            related = [f for f in functions if _name_tokens(f.name) & related_words]
            shown = ", ".join(f.signature for f in (fitting or related or functions)[:3])
            why = (
                f"several functions could be {wanted}: {shown}"
                if len(fitting) > 1
                else f"no function takes the {n} arguments of {wanted}"
                + (f" (found {shown})" if shown else "")
            )
            return SignatureMatch(function=None, found=shown, reason=why, related=bool(related))
        chosen = fitting[0]
    order, by_name = _argument_order(chosen, params, aliases)
    # The contract's own name in the contract's order is trusted whatever the arguments are called.
    exact = chosen.name == function and order == tuple(range(n))
    return SignatureMatch(
        function=chosen.name,
        order=order,
        exact=exact,
        by_name=by_name == n or exact,
        found=chosen.signature,
        related=chosen.name == function
        or bool(_name_tokens(chosen.name) & related_words)
        or by_name * 2 >= n,
    )
