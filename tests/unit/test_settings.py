"""Settings: one place, every knob documented, the README's table generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.cli.main import app
from shared.settings import Settings, knobs, markdown_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_setting_has_a_description() -> None:
    missing = [name for name, field in Settings.model_fields.items() if not field.description]
    assert missing == []


def test_the_readme_table_is_the_generated_one() -> None:
    text = README.read_text()
    between = text.split("<!-- settings:begin -->\n", 1)[1].split("<!-- settings:end -->", 1)[0]
    assert between == markdown_table(), "README is stale: paste `tessera config --markdown` in"


def test_values_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_QUEUES", '{"team-a": ["alice"], "shared": ["*"]}')
    monkeypatch.setenv("TESSERA_LEASE_S", "12.5")
    monkeypatch.setenv("DATABASE_URL", "postgresql://x@127.0.0.1:1/y")
    settings = Settings()
    assert settings.queues == {"team-a": ["alice"], "shared": ["*"]}
    shown = {k.variable: k for k in knobs(settings)}
    assert shown["TESSERA_LEASE_S"].value == "12.5" and shown["TESSERA_LEASE_S"].default == "30"
    assert shown["DATABASE_URL"].value == "postgresql://x@127.0.0.1:1/y"
    assert shown["TESSERA_QUEUES"].value == "shared, team-a"


def test_config_command_names_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_LEASE_S", "-1")
    result = CliRunner().invoke(app, ["config"])
    assert result.exit_code == 2
    assert "TESSERA_LEASE_S" in result.output and "greater than 0" in result.output
