"""Configuration from the environment, read when asked for, never at import.

``SEQEXPORT_DATABASE_URL``  the control plane (default: SQLite under ``SEQEXPORT_HOME``)
``SEQEXPORT_SOURCE_URL``    Sequenzy's source database (default: SQLite under ``SEQEXPORT_HOME``)
``SEQEXPORT_SECRET_KEYS``   credential keys, ``kid:base64`` comma-separated. Required, except in the
                            local mode, where a generated key file under ``SEQEXPORT_HOME`` is used
``SEQEXPORT_HOME``          local state folder (default ``./.seqexport``)
``SEQEXPORT_ALLOW_LOCAL``   operator setting: ``1`` enables local folders, loopback endpoints and
                            the generated local key file
``SEQEXPORT_PUT_DEADLINE_SECONDS``  operator setting: wall-clock limit of one write to a customer's
                            store, all attempts included (default 120)
``SEQEXPORT_ALLOWED_PORTS`` operator setting: the ports a customer's endpoint may name, comma-separated
                            (default ``443,9000``; 443 is always allowed)
``SEQEXPORT_AWS_ACCESS_KEY_ID``, ``SEQEXPORT_AWS_SECRET_ACCESS_KEY`` (and ``SEQEXPORT_AWS_SESSION_TOKEN``)
                            operator setting: the exporter's own AWS identity, used only to assume
                            customers' roles through STS; unset, role exports are not offered
``SEQEXPORT_AWS_PRINCIPAL_ARN``  the ARN of that identity, which customers name in their trust policy
``SEQEXPORT_AWS_REGION``    the STS region (default us-east-1); ``SEQEXPORT_STS_ENDPOINT`` overrides
                            the endpoint (https, or loopback in the local mode)

This module is the one place that reads them. The CLI, the HTTP API and the benchmarks call
`Settings.from_env`; the Dagster resources (`seqexport_dagster.defs.resources`) carry the same
variables as fields bound to `dg.EnvVar` and call `Settings.from_fields`, which is `from_env` with
those fields in place of the variables. So a default (the SQLite files under ``SEQEXPORT_HOME``, the
local key file) is decided here once, whichever way the settings arrive.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from seqexport_dagster.destination import OperatorPolicy
from seqexport_dagster.destination.policy import DEFAULT_ALLOWED_PORTS, AwsIdentity, parse_ports
from seqexport_dagster.errors import ConfigurationError, SecretKeyError
from seqexport_dagster.store.crypto import SecretBox, local_key_spec
from seqexport_dagster.store.database import normalize_url

DEFAULT_PUT_DEADLINE_S = 120.0
#: The variables a Dagster resource carries as fields, by field name (`Settings.from_fields`).
RESOURCE_VARIABLES: Final = {
    "database_url": "SEQEXPORT_DATABASE_URL",
    "secret_keys": "SEQEXPORT_SECRET_KEYS",
    "source_url": "SEQEXPORT_SOURCE_URL",
    "allow_local": "SEQEXPORT_ALLOW_LOCAL",
}


@dataclass(frozen=True)
class Settings:
    database_url: str = field(repr=False)  # may hold a database password
    source_url: str = field(repr=False)
    secret_keys: str = field(repr=False)
    home: Path
    allow_local: bool = False
    #: The variable an operator fixes when ``database_url`` points at the wrong place.
    database_url_from: str = "SEQEXPORT_DATABASE_URL"
    put_deadline_s: float = DEFAULT_PUT_DEADLINE_S
    #: A local key file given explicitly (the demo's resources): used when no keys are set.
    secret_key_file: Path | None = None
    allowed_ports: frozenset[int] = DEFAULT_ALLOWED_PORTS
    #: The exporter's own AWS identity, for assuming customers' roles only (never for S3 itself).
    aws_identity: AwsIdentity | None = field(default=None, repr=False)

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
            allow_local=env.get("SEQEXPORT_ALLOW_LOCAL", "").strip().lower() in ("1", "true", "yes"),
            database_url_from=url_from,
            put_deadline_s=_deadline(env.get("SEQEXPORT_PUT_DEADLINE_SECONDS", "")),
            allowed_ports=parse_ports(env.get("SEQEXPORT_ALLOWED_PORTS", "")),
            aws_identity=_aws_identity(env),
        )

    @classmethod
    def from_fields(
        cls, fields: Mapping[str, str], *, secret_key_file: str = "", env: Mapping[str, str] | None = None
    ) -> Settings:
        """`from_env`, with each non-empty field (named as in `RESOURCE_VARIABLES`) in place of its variable.

        How a Dagster resource's fields become settings: a field bound to `dg.EnvVar` holds the
        variable's value, a field a test or the demo sets holds its own, and an empty field leaves the
        variable (or its default) in force. ``secret_key_file`` names a local key file (its path may be
        stored by Dagster, its content never is).
        """
        env = os.environ if env is None else env
        given = {RESOURCE_VARIABLES[name]: value for name, value in fields.items() if value}
        settings = cls.from_env({**env, **given})
        return replace(settings, secret_key_file=Path(secret_key_file)) if secret_key_file else settings

    def secret_box(self) -> SecretBox:
        """The credential keys; fails closed.

        Outside the local mode a missing ``SEQEXPORT_SECRET_KEYS`` is a configuration error: a
        key generated on the fly into the working directory would seal customers' secrets with a
        key nobody backs up or shares with the run workers.
        """
        if self.secret_keys.strip():
            return SecretBox.parse(self.secret_keys)
        if self.secret_key_file is not None:
            return SecretBox.parse(local_key_spec(self.secret_key_file))
        if not self.allow_local:
            raise SecretKeyError(
                "SEQEXPORT_SECRET_KEYS is not set: give the credential keys (kid:base64-32-bytes, comma-separated; "
                "the first encrypts). A generated key file is used only in the local mode (SEQEXPORT_ALLOW_LOCAL=1)"
            )
        return SecretBox.parse(local_key_spec(self.home / "secret.key"))

    @property
    def policy(self) -> OperatorPolicy:
        return OperatorPolicy(
            allow_local=self.allow_local,
            put_deadline_s=self.put_deadline_s,
            allowed_ports=self.allowed_ports,
            aws_identity=self.aws_identity,
        )


def _deadline(text: str) -> float:
    if not text.strip():
        return DEFAULT_PUT_DEADLINE_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 <= value <= 3600:  # NaN fails too
        raise ConfigurationError("SEQEXPORT_PUT_DEADLINE_SECONDS must be a number of seconds from 1 to 3600")
    return value


def _aws_identity(env: Mapping[str, str]) -> AwsIdentity | None:
    key = env.get("SEQEXPORT_AWS_ACCESS_KEY_ID", "").strip()
    secret = env.get("SEQEXPORT_AWS_SECRET_ACCESS_KEY", "").strip()
    principal = env.get("SEQEXPORT_AWS_PRINCIPAL_ARN", "").strip()
    if not (key or secret or principal):
        return None
    missing = [
        name
        for name, value in (
            ("SEQEXPORT_AWS_ACCESS_KEY_ID", key),
            ("SEQEXPORT_AWS_SECRET_ACCESS_KEY", secret),
            ("SEQEXPORT_AWS_PRINCIPAL_ARN", principal),
        )
        if not value
    ]
    if missing:
        raise ConfigurationError(f"the exporter's AWS identity is incomplete: set {', '.join(missing)} as well")
    endpoint = env.get("SEQEXPORT_STS_ENDPOINT", "").strip() or None
    local = env.get("SEQEXPORT_ALLOW_LOCAL", "").strip().lower() in ("1", "true", "yes")
    if endpoint and not endpoint.startswith("https://") and not (local and endpoint.startswith("http://127.0.0.1:")):
        raise ConfigurationError("SEQEXPORT_STS_ENDPOINT must be an https:// URL")
    return AwsIdentity(
        access_key_id=key,
        secret_access_key=secret,
        principal_arn=principal,
        session_token=env.get("SEQEXPORT_AWS_SESSION_TOKEN", "").strip() or None,
        region=env.get("SEQEXPORT_AWS_REGION", "").strip() or "us-east-1",
        sts_endpoint=endpoint,
    )
