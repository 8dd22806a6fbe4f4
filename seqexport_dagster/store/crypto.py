"""Credential encryption: AES-256-GCM bound to the export id, with key rotation.

``SEQEXPORT_SECRET_KEYS`` holds one or more keys, ``kid:base64key`` separated by commas; the first
one encrypts, all of them decrypt. Rotation: put the new key first, run ``seqexport rotate-keys``
(re-encrypts every stored secret), then drop the old key. The export id is the associated data, so
a ciphertext copied onto another export's row does not open.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from seqexport_dagster.errors import SecretKeyError

_KID_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_VERSION = "v1"


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

    def encrypt(self, plaintext: str, export_id: str) -> str:
        nonce = secrets.token_bytes(12)
        sealed = AESGCM(self.keys[self.primary]).encrypt(nonce, plaintext.encode(), export_id.encode())
        return ".".join((_VERSION, self.primary, _b64(nonce), _b64(sealed)))

    def decrypt(self, token: str, export_id: str) -> str:
        try:
            version, kid, nonce, sealed = token.split(".")
        except ValueError:
            raise SecretKeyError(f"stored secret of export {export_id} is malformed") from None
        if version != _VERSION:
            raise SecretKeyError(f"stored secret of export {export_id} has unknown format {version!r}")
        key = self.keys.get(kid)
        if key is None:
            raise SecretKeyError(
                f"stored secret of export {export_id} was sealed with key {kid!r}, which is not in SEQEXPORT_SECRET_KEYS"
            )
        try:
            return AESGCM(key).decrypt(_unb64(nonce), _unb64(sealed), export_id.encode()).decode()
        except (InvalidTag, binascii.Error, ValueError):
            raise SecretKeyError(f"stored secret of export {export_id} does not open with key {kid!r}") from None

    def needs_rotation(self, token: str) -> bool:
        return token.split(".")[1:2] != [self.primary]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_key_spec(kid: str = "k1") -> str:
    return f"{kid}:{base64.b64encode(secrets.token_bytes(32)).decode()}"


def local_key_spec(path: Path) -> str:
    """A key for local and demo use, generated once into ``path`` (mode 0600).

    Production sets SEQEXPORT_SECRET_KEYS from a secret manager; this only keeps a laptop's demo from
    needing any setup.
    """
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = new_key_spec("local")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(spec + "\n")
    return spec
