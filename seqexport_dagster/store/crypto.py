"""Credential encryption: AES-256-GCM bound to the export and its destination, with key rotation.

``SEQEXPORT_SECRET_KEYS`` holds one or more keys, ``kid:base64key`` separated by commas; the first
one encrypts, all of them decrypt. Rotation: put the new key first, run ``seqexport rotate-keys``
(re-encrypts every stored secret), then drop the old key.

The associated data (`SealBinding`) is the export id, provider, endpoint, bucket and access key id
(format ``v2``). A ciphertext copied onto another export's row does not open, and neither does one
whose row was repointed at another bucket, endpoint or key id by someone who can write the control
plane but has no key: the secret only ever goes where the customer sent it. Format ``v1`` (export
id only) is read by `SecretBox.reseal` alone, which migration 0003 and ``rotate-keys`` use to
upgrade old rows; a run never opens a ``v1`` secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from seqexport_dagster.errors import SecretKeyError

_KID_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}\Z")
_VERSION = "v2"
_LEGACY = "v1"


@dataclass(frozen=True, slots=True)
class SealBinding:
    """What a sealed secret is bound to: it opens only for this export at this destination."""

    export_id: str
    provider: str
    endpoint: str | None
    bucket: str
    access_key_id: str | None

    def associated_data(self) -> bytes:
        # JSON, not a separator join: no two different bindings encode alike.
        fields = [self.export_id, self.provider, self.endpoint or "", self.bucket, self.access_key_id or ""]
        return json.dumps(fields, separators=(",", ":")).encode()


@dataclass(frozen=True)
class SecretBox:
    keys: dict[str, bytes] = field(repr=False)
    primary: str

    @classmethod
    def parse(cls, spec: str) -> SecretBox:
        keys: dict[str, bytes] = {}
        order: list[str] = []
        for item in (part.strip() for part in spec.split(",")):
            if not item:
                continue
            kid, sep, encoded = item.partition(":")
            if not sep or not _KID_RE.match(kid):
                raise SecretKeyError(
                    "SEQEXPORT_SECRET_KEYS: each entry must be kid:base64key (kid: letters, digits, _-)"
                )
            try:
                key = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise SecretKeyError(f"SEQEXPORT_SECRET_KEYS: key {kid!r} is not valid base64") from None
            if len(key) != 32:
                raise SecretKeyError(f"SEQEXPORT_SECRET_KEYS: key {kid!r} must be 32 bytes (256 bits)")
            if kid in keys:
                raise SecretKeyError(f"SEQEXPORT_SECRET_KEYS: key id {kid!r} appears twice")
            keys[kid] = key
            order.append(kid)
        if not order:
            raise SecretKeyError("SEQEXPORT_SECRET_KEYS: no key given")
        return cls(keys, order[0])

    def encrypt(self, plaintext: str, binding: SealBinding) -> str:
        nonce = secrets.token_bytes(12)
        sealed = AESGCM(self.keys[self.primary]).encrypt(nonce, plaintext.encode(), binding.associated_data())
        return ".".join((_VERSION, self.primary, _b64(nonce), _b64(sealed)))

    def decrypt(self, token: str, binding: SealBinding) -> str:
        version = token.split(".", 1)[0]
        if version == _LEGACY:
            raise SecretKeyError(
                f"stored secret of export {binding.export_id} is in the old format bound only to the export id; "
                "run `seqexport rotate-keys` to re-seal it"
            )
        return self._open(token, binding, _VERSION, binding.associated_data())

    def reseal(self, token: str, binding: SealBinding) -> str:
        """The secret sealed again with the primary key and the full binding (upgrades ``v1``)."""
        if token.split(".", 1)[0] == _LEGACY:
            plain = self._open(token, binding, _LEGACY, binding.export_id.encode())
        else:
            plain = self.decrypt(token, binding)
        return self.encrypt(plain, binding)

    def derived_key(self, purpose: str) -> bytes:
        """A 32-byte key for ``purpose`` (HMAC-SHA256 of it under the primary key), never the key itself.

        For keyed digests the control plane stores (idempotency fingerprints): whoever reads the
        control plane without ``SEQEXPORT_SECRET_KEYS`` cannot recompute them. It follows the
        primary key, so a digest made before a key rotation no longer matches after it.
        """
        return hmac.new(self.keys[self.primary], f"seqexport/{purpose}".encode(), hashlib.sha256).digest()

    def needs_rotation(self, token: str) -> bool:
        return token.split(".")[:2] != [_VERSION, self.primary]

    def _open(self, token: str, binding: SealBinding, expected: str, associated: bytes) -> str:
        export_id = binding.export_id
        try:
            version, kid, nonce, sealed = token.split(".")
        except ValueError:
            raise SecretKeyError(f"stored secret of export {export_id} is malformed") from None
        if version != expected:
            raise SecretKeyError(f"stored secret of export {export_id} has unknown format {version[:8]!r}")
        key = self.keys.get(kid)
        if key is None:
            raise SecretKeyError(
                f"stored secret of export {export_id} was sealed with key {kid[:32]!r}, which is not in SEQEXPORT_SECRET_KEYS"
            )
        try:
            return AESGCM(key).decrypt(_unb64(nonce), _unb64(sealed), associated).decode()
        except (InvalidTag, binascii.Error, ValueError):
            raise SecretKeyError(
                f"stored secret of export {export_id} does not open with key {kid!r} for its provider, endpoint, "
                "bucket and access key id (sealed for another destination, or altered)"
            ) from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_key_spec(kid: str = "k1") -> str:
    return f"{kid}:{base64.b64encode(secrets.token_bytes(32)).decode()}"


def local_key_spec(path: Path) -> str:
    """A key for local and demo use, generated once into ``path`` (mode 0600, folder 0700).

    Only for the local mode: production sets SEQEXPORT_SECRET_KEYS from a secret manager (see
    `seqexport_dagster.delivery.settings.Settings.secret_box`). A key file that other users can read is refused,
    not used: whoever read it could open every stored secret.
    """
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise SecretKeyError(
                f"the local key file {path} has mode {mode:04o}: other users can read it; "
                f"run `chmod 600 {path}` (or set SEQEXPORT_SECRET_KEYS)"
            )
        return path.read_text().strip()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    spec = new_key_spec("local")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(spec + "\n")
    return spec
