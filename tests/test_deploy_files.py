"""The deployment recipe stays in step with the code: compose.yaml parses, names only settings
that exist, and wires the API to PostgreSQL, the Chroma server and the proxy. (No container
runtime here: this checks the files, docs/deploy.md says what was run for real.)"""

from __future__ import annotations

from pathlib import Path

import yaml

from server.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_compose_has_the_scale_out_topology() -> None:
    services = compose()["services"]
    assert {"postgres", "chroma", "ingest", "api", "proxy"} <= set(services)
    api = services["api"]
    env = api["environment"]
    assert env["SPARRING_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert "@postgres:5432/" in env["SPARRING_DATABASE_URL"]
    assert env["SPARRING_CHROMA_URL"] == "http://chroma:8000"
    assert api["command"][:2] == ["sparring", "serve"]
    assert api["depends_on"]["ingest"]["condition"] == "service_completed_successfully"
    assert services["ingest"]["command"] == ["sparring", "ingest"]
    assert "./deploy/Caddyfile:/etc/caddy/Caddyfile:ro" in services["proxy"]["volumes"]


def test_compose_names_only_real_settings() -> None:
    fields = {f"SPARRING_{name.upper()}" for name in Settings.model_fields}
    for name, service in compose()["services"].items():
        for key in service.get("environment") or {}:
            if key.startswith("SPARRING_") and key != "SPARRING_SITE":  # SITE is Caddy's
                assert key in fields, f"{name}: {key} is not a setting"


def test_proxy_and_image_match_the_api() -> None:
    caddy = (ROOT / "deploy" / "Caddyfile").read_text()
    assert "name api" in caddy and "port 8000" in caddy
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "torch==2.13.0" in dockerfile  # the pin of pyproject.toml, never an unpinned torch
    assert "bubblewrap" in dockerfile
