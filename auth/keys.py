"""API keys: stored hashed in a JSON file, mapped to a principal, revocable without restart.

A key reads `qk_<key id>_<secret>`. Only SHA-256 of the whole key is stored (keys are 190
random bits, so a slow hash adds nothing). Lookup goes by key id, then the hashes are
compared in constant time. The file is re-read whenever it changes on disk, so a revocation
by `quarry keys revoke` takes effect on the next request of a running server.

A key may carry `write_prefixes` (`quarry keys add --write-prefix P`, repeatable): the starts
of the document ids its `write` scope may change (routes/service/write_access.py). A record
without the field (every key made before it existed, and a key made without the flag) may
write every id, as it always could: making old keys write nothing would stop every running
content pipeline at the upgrade, and a file the server re-reads at any moment cannot be
migrated in place. Such keys still write only documents they can read; an operator narrows
a key by adding one with prefixes and revoking the old one.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Sequence, TypeGuard

from retrieval.errors import InvalidRequest, ServerFault, Unauthenticated
from retrieval.types import Principal, check_doc_id

PREFIX = "qk_"


@dataclass(frozen=True)
class KeyRecord:
    key_id: str
    sha256: str
    principal: str
    groups: tuple[str, ...]
    scopes: tuple[str, ...]
    created_at: str
    revoked_at: str | None = None
    write_prefixes: tuple[str, ...] | None = None  # None: every id (see the module docstring)

    def to_principal(self) -> Principal:
        return Principal(self.principal, self.groups, frozenset(self.scopes), self.write_prefixes)

    def public(self) -> dict:
        """What `keys list` shows: never the hash."""
        d = asdict(self)
        d.pop("sha256")
        d["groups"], d["scopes"] = list(self.groups), list(self.scopes)
        d["write_prefixes"] = list(self.write_prefixes) if self.write_prefixes is not None else None
        return d


def _well_formed(token: str | None) -> TypeGuard[str]:
    return token is not None and token.startswith(PREFIX) and len(token) <= 200


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class KeyStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._records: dict[str, KeyRecord] = {}

    # -- reading -----------------------------------------------------------------------
    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self) -> dict[str, KeyRecord]:
        stamp = self._file_stamp()
        with self._lock:
            if stamp != self._stamp:
                self._records = self._read() if stamp else {}
                self._stamp = stamp
            return self._records

    def _read(self) -> dict[str, KeyRecord]:
        """The records on disk. A file that cannot be read or parsed is the server's fault,
        never the caller's; and no key is accepted while it lasts (fail closed)."""
        try:
            raw = json.loads(self.path.read_text())
            out = {}
            for r in raw.get("keys", []):
                prefixes = r.get("write_prefixes")
                if prefixes is not None and not isinstance(prefixes, list):
                    raise TypeError(f"write_prefixes of key {r.get('key_id')!r} is not a list")
                rec = KeyRecord(r["key_id"], r["sha256"], r["principal"], tuple(r.get("groups", ())),
                                tuple(r.get("scopes", ("query",))), r["created_at"], r.get("revoked_at"),
                                tuple(prefixes) if prefixes is not None else None)
                out[rec.key_id] = rec
            return out
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ServerFault(f"keys file {self.path} is unreadable: {type(e).__name__}: {e}") from None

    def records(self) -> list[KeyRecord]:
        return list(self._load().values())

    def authenticate(self, token: str | None) -> Principal:
        """The principal of a valid, unrevoked key; anything else is `unauthenticated`."""
        return self.authenticate_key(token).to_principal()

    def authenticate_key(self, token: str | None) -> KeyRecord:
        """The record of a valid, unrevoked key; anything else is `unauthenticated`."""
        if not _well_formed(token):
            raise Unauthenticated("missing or malformed API key")
        rec = self.record_of(token)
        if rec is None or rec.revoked_at:
            raise Unauthenticated("invalid or revoked API key")
        return rec

    def record_of(self, token: str | None) -> KeyRecord | None:
        """The record this key belongs to, revoked or not; None when no record matches it."""
        if not _well_formed(token):
            return None
        rec = self._load().get(token[len(PREFIX):].split("_", 1)[0])
        # Compare even when the id is unknown so timing does not reveal which ids exist.
        expected = rec.sha256 if rec else "0" * 64
        return rec if hmac.compare_digest(_digest(token), expected) and rec is not None else None

    # -- writing (CLI) -------------------------------------------------------------------
    @contextmanager
    def _locked_write(self) -> Iterator[dict[str, KeyRecord]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(self.path.suffix + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            records = self._read() if self.path.exists() else {}
            yield records
            tmp = self.path.with_suffix(self.path.suffix + ".tmp")
            payload = {"keys": [asdict(r) for r in records.values()]}
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(payload, f, indent=2)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def add(self, principal: str, groups: Sequence[str] = (), scopes: Sequence[str] = ("query",),
            write_prefixes: Sequence[str] | None = None) -> tuple[str, KeyRecord]:
        """Create a key; the plaintext is returned once and never stored. `write_prefixes`
        (given in any form; stored in normal form) bound the ids it may write; None: every id."""
        prefixes = None
        if write_prefixes is not None:
            if not {"write", "admin"} & set(scopes):
                raise InvalidRequest("write prefixes bound the 'write' scope: give the key 'write' (or 'admin') too")
            prefixes = tuple(dict.fromkeys(check_doc_id(p) for p in write_prefixes))
        Principal(principal, tuple(groups), frozenset(scopes), prefixes)  # validates names, scopes and prefixes
        key_id = secrets.token_hex(5)
        token = f"{PREFIX}{key_id}_{secrets.token_urlsafe(24)}"
        rec = KeyRecord(key_id, _digest(token), principal, tuple(groups), tuple(dict.fromkeys(scopes)),
                        datetime.now(timezone.utc).isoformat(timespec="seconds"), write_prefixes=prefixes)
        with self._locked_write() as records:
            records[key_id] = rec
        return token, rec

    def revoke(self, key_id: str) -> KeyRecord:
        with self._locked_write() as records:
            rec = records.get(key_id)
            if rec is None:
                raise InvalidRequest(f"no key with id {key_id!r}")
            if not rec.revoked_at:
                rec = records[key_id] = replace(rec, revoked_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        return rec
