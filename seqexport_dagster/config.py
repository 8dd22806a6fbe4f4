"""Configuration from the environment, read when asked for, never at import.

``SEQEXPORT_DATABASE_URL``  the control plane (default: SQLite under ``SEQEXPORT_HOME``)
``SEQEXPORT_SOURCE_URL``    Sequenzy's source database (default: SQLite under ``SEQEXPORT_HOME``)
``SEQEXPORT_SECRET_KEYS``   credential keys, ``kid:base64`` comma-separated (default: a generated
                            local key file under ``SEQEXPORT_HOME``, for local use only)
``SEQEXPORT_HOME``          local state folder (default ``./.seqexport``)
``SEQEXPORT_ALLOW_LOCAL``   operator setting: ``1`` enables local folders and loopback endpoints
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from seqexport_dagster.destination.base import OperatorPolicy
from seqexport_dagster.store.crypto import SecretBox, local_key_spec
from seqexport_dagster.store.database import normalize_url


@dataclass(frozen=True)
class Settings:
    database_url: str
    source_url: str
    secret_keys: str = field(repr=False)
    home: Path
    allow_local: bool = False
    #: The variable an operator fixes when ``database_url`` points at the wrong place.
    database_url_from: str = "SEQEXPORT_DATABASE_URL"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path(env.get("SEQEXPORT_HOME") or ".seqexport").resolve()
        if env.get("SEQEXPORT_DATABASE_URL"):
            url_from = "SEQEXPORT_DATABASE_URL"
        elif env.get("SEQEXPORT_HOME"):
            url_from = "SEQEXPORT_HOME (SEQEXPORT_DATABASE_URL is not set)"
        else:
            url_from = "SEQEXPORT_HOME (neither it nor SEQEXPORT_DATABASE_URL is set: ./.seqexport is the default)"
        return cls(
            database_url=normalize_url(env.get("SEQEXPORT_DATABASE_URL") or f"sqlite:///{home / 'control.db'}"),
            source_url=normalize_url(env.get("SEQEXPORT_SOURCE_URL") or f"sqlite:///{home / 'source.db'}"),
            secret_keys=env.get("SEQEXPORT_SECRET_KEYS", ""),
            home=home,
            allow_local=env.get("SEQEXPORT_ALLOW_LOCAL", "").lower() in ("1", "true", "yes"),
            database_url_from=url_from,
        )

    def secret_box(self) -> SecretBox:
        return SecretBox.parse(self.secret_keys or local_key_spec(self.home / "secret.key"))

    @property
    def policy(self) -> OperatorPolicy:
        return OperatorPolicy(allow_local=self.allow_local)
