"""The verification cache: the same verifier, configuration, task and response judge the same.

Keys are a content hash of (verifier name, its configuration, the task's fields, the response
text). An in-memory LRU serves repeats within a run; an optional SQLite file keeps verdicts across
runs and resumes (written in batches: a kill loses at most the last batch, never correctness,
because a missing entry is only a miss).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from gymbench.errors import GymbenchError
from gymbench.types import Verdict

RUNTIME_FIELDS = ("task_index", "rollout_index", "attempt", "retries", "status", "response", "reward", "timings")
COMMIT_EVERY = 256


def cache_key(verifier: str, config: Mapping[str, Any], row: Mapping[str, Any], text: str) -> bytes:
    task = {key: value for key, value in row.items() if key not in RUNTIME_FIELDS and key != "responses_create_params"}
    payload = orjson.dumps([verifier, config, task, text], option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.blake2b(payload, digest_size=16).digest()


class VerdictCache:
    def __init__(self, size: int, path: str | Path | None = None) -> None:
        self.size = size
        self.memory: OrderedDict[bytes, Verdict] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self._db: sqlite3.Connection | None = None
        self._unsaved = 0
        if path is not None:
            self._db = _open(Path(path))

    def get(self, key: bytes) -> Verdict | None:
        verdict = self.memory.get(key)
        if verdict is not None:
            self.memory.move_to_end(key)
        elif self._db is not None:
            found = self._db.execute("SELECT verdict FROM verdicts WHERE key = ?", (key,)).fetchone()
            if found is not None:
                verdict = _decode(found[0])
                self._remember(key, verdict)
        if verdict is None:
            self.misses += 1
        else:
            self.hits += 1
        return verdict

    def put(self, key: bytes, verdict: Verdict) -> None:
        if verdict.failure_kind == "verifier_error":
            return  # a crash may be transient: do not make it permanent
        self._remember(key, verdict)
        if self._db is not None:
            self._db.execute("INSERT OR REPLACE INTO verdicts (key, verdict) VALUES (?, ?)", (key, _encode(verdict)))
            self._unsaved += 1
            if self._unsaved >= COMMIT_EVERY:
                self.commit()

    def _remember(self, key: bytes, verdict: Verdict) -> None:
        if self.size <= 0:
            return
        self.memory[key] = verdict
        if len(self.memory) > self.size:
            self.memory.popitem(last=False)

    def commit(self) -> None:
        if self._db is not None and self._unsaved:
            self._db.commit()
            self._unsaved = 0

    def close(self) -> None:
        if self._db is not None:
            self.commit()
            self._db.close()
            self._db = None


def _open(path: Path) -> sqlite3.Connection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS verdicts (key BLOB PRIMARY KEY, verdict BLOB NOT NULL)")
        db.commit()
    except (sqlite3.DatabaseError, OSError) as exc:
        raise GymbenchError(
            f"{path}: cannot use as a verification cache ({exc}); delete it or choose another path"
        ) from None
    return db


def check_cache_file(path: str | Path) -> None:
    """Open (creating) the cache file once, so a run never starts with a cache it cannot use."""
    _open(Path(path)).close()


def _encode(verdict: Verdict) -> bytes:
    return orjson.dumps([verdict.reward, verdict.details, verdict.failure_kind], default=str)


def _decode(blob: bytes) -> Verdict:
    reward, details, failure_kind = orjson.loads(blob)
    return Verdict(reward, details, failure_kind)
