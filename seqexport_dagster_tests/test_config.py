"""One configuration path: `Settings.from_env` decides every default; resource fields only replace variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqexport_dagster.delivery.assembly import open_control_plane
from seqexport_dagster.delivery.settings import RESOURCE_VARIABLES, Settings
from seqexport_dagster.errors import ConfigurationError, SecretKeyError
from seqexport_dagster.store.crypto import new_key_spec


def test_empty_fields_leave_the_environment_and_its_defaults_in_force(tmp_path: Path) -> None:
    env = {"SEQEXPORT_HOME": str(tmp_path), "SEQEXPORT_ALLOW_LOCAL": "1"}
    fields = {name: "" for name in RESOURCE_VARIABLES}
    assert Settings.from_fields(fields, env=env) == Settings.from_env(env)
    assert Settings.from_env(env).database_url == f"sqlite:///{tmp_path / 'control.db'}"


def test_a_field_replaces_its_variable_and_nothing_else(tmp_path: Path) -> None:
    env = {"SEQEXPORT_HOME": str(tmp_path), "SEQEXPORT_SOURCE_URL": "sqlite:///env-source.db"}
    settings = Settings.from_fields({"database_url": "postgres://u@h/db", "allow_local": " yes "}, env=env)
    assert settings.database_url == "postgresql+psycopg2://u@h/db"  # normalized as the CLI's would be
    assert settings.source_url == "sqlite:///env-source.db"
    assert settings.allow_local and settings.policy.allow_local
    # A field set to a false value overrides a true variable.
    assert not Settings.from_fields({"allow_local": "0"}, env={"SEQEXPORT_ALLOW_LOCAL": "1"}).allow_local


def test_keys_fail_closed_unless_a_key_file_or_the_local_mode_gives_them(tmp_path: Path) -> None:
    env = {"SEQEXPORT_HOME": str(tmp_path)}
    with pytest.raises(SecretKeyError):
        Settings.from_fields({}, env=env).secret_box()
    key_file = tmp_path / "demo" / "secret.key"
    box = Settings.from_fields({}, secret_key_file=str(key_file), env=env).secret_box()
    assert key_file.is_file() and box.primary
    spec = new_key_spec("k1")
    assert Settings.from_fields({"secret_keys": spec}, env=env).secret_box().primary == "k1"


def test_open_control_plane_refuses_a_missing_one_and_never_echoes_the_url(tmp_path: Path) -> None:
    missing = Settings.from_env({"SEQEXPORT_HOME": str(tmp_path / "typo"), "SEQEXPORT_SECRET_KEYS": new_key_spec("k")})
    with pytest.raises(ConfigurationError, match="no control plane"):
        open_control_plane(missing, must_exist=True)
    assert not (tmp_path / "typo" / "control.db").exists()
    bad = Settings.from_env({"SEQEXPORT_DATABASE_URL": "nope://:hunter2@x", "SEQEXPORT_SECRET_KEYS": new_key_spec("k")})
    with pytest.raises(ConfigurationError) as err:
        open_control_plane(bad)
    assert "hunter2" not in str(err.value)
