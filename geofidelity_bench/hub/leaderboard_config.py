"""The maintainer's pin of a results repo: ``leaderboard.json`` (docs/benchmark.md section 13).

A leaderboard trusts nothing a submitter writes. Its maintainer runs ``geofidelity-bench
leaderboard init`` once per comparable group; that writes ``leaderboard.json`` at the root of the
results repo and the group's real-image anchors (computed by the maintainer, never taken from a
submission) under ``anchors/{group_id}/``. The file says, per group: which benchmark (id, revision,
fingerprint), which encoder (name, weights, config hash), which protocol, which GAAS segmenter,
which bootstrap setting, and the group's block set per prompt condition (the blocks whose prompt
the benchmark can build: the block set comes from the benchmark, never from submissions); and, for
the repo, which group is the default and whether only verified submissions are ranked.

This module is plain data and parsing (no model, no Hub request): :class:`LeaderboardConfig`,
:class:`PinnedGroup`, :func:`parse_config` (every problem names the field) and
:func:`condition_blocks`. Writing it to the Hub is :mod:`geofidelity_bench.hub.leaderboard`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from ..comparability import group_id as _group_id
from ..errors import GeoFidelityError

LEADERBOARD_FILE = "leaderboard.json"
#: The format of leaderboard.json (a reader refuses another major version).
FORMAT = "geofidelity-bench-leaderboard/1"
VERIFICATIONS_DIR = "verifications"
#: Statuses of a submission's verification (``pending``: no verification record yet, self-reported).
VERIFIED, MISMATCH, UNVERIFIABLE, PENDING = "verified", "mismatch", "unverifiable", "pending"
VERIFICATION_STATUSES = (VERIFIED, MISMATCH, UNVERIFIABLE)


class LeaderboardConfigError(GeoFidelityError, ValueError):
    """leaderboard.json cannot be read; the message names the repo, the field and what to do."""


@dataclass(frozen=True)
class PinnedGroup:
    """One comparable group pinned by the maintainer."""

    group_id: str
    #: {"id": what `--benchmark` named (a Hub id, "demo" or a folder's name), "name", "revision", "fingerprint"}
    benchmark: dict
    #: {"name", "weights" (None: the registry's default), "config_hash"}
    encoder: dict
    protocol_version: str
    #: {"name", "weights", "config_hash"} of the GAAS segmenter, or None (GAAS is not ranked in this group)
    segmenter: dict | None
    #: {"n_resamples", "seed"}: the setting of every interval shown for the group
    bootstrap: dict
    #: {condition: sorted block ids}: the group's block set per prompt condition (from the benchmark)
    blocks: dict
    #: run id of the maintainer's anchor run (anchors/{group_id}/run/{run_id}.json)
    anchors_run_id: str = ""
    #: the library version that pinned the group
    pinned_with: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (str(self.benchmark.get("fingerprint", "")), str(self.encoder.get("config_hash", "")),
                str(self.protocol_version))

    @property
    def segmenter_hash(self) -> str:
        """The GAAS segmenter as submitted rows record it (its config hash; "" without one)."""
        return str((self.segmenter or {}).get("config_hash") or "")

    @property
    def all_blocks(self) -> list[str]:
        return sorted({b for bl in self.blocks.values() for b in bl})

    def label(self) -> str:
        fp, enc, protocol = self.key
        return (f"{self.benchmark.get('name') or self.benchmark.get('id')} ({fp[:12]}), encoder "
                f"{self.encoder.get('name')} ({enc[:12]}), protocol {protocol}")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LeaderboardConfig:
    """leaderboard.json: the pinned groups, the default one, and whether only verified rows are ranked."""

    groups: dict = field(default_factory=dict)  # {group_id: PinnedGroup}
    default_group: str = ""
    require_verified: bool = False
    format: str = FORMAT

    @property
    def default(self) -> PinnedGroup:
        return self.groups[self.default_group]

    def with_group(self, group: PinnedGroup, *, make_default: bool = False,
                   require_verified: bool | None = None) -> "LeaderboardConfig":
        groups = dict(self.groups)
        groups[group.group_id] = group
        default = group.group_id if (make_default or not self.default_group) else self.default_group
        req = self.require_verified if require_verified is None else bool(require_verified)
        return LeaderboardConfig(groups, default, req, FORMAT)

    def to_json(self) -> dict:
        return {"format": self.format, "default_group": self.default_group, "require_verified": self.require_verified,
                "groups": {gid: g.to_json() for gid, g in sorted(self.groups.items())}}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def _need(record: Mapping, key: str, kind, where: str):
    if not isinstance(record, Mapping) or key not in record:
        raise LeaderboardConfigError(f"{where} lacks {key!r}: re-pin the group with `geofidelity-bench leaderboard init`")
    value = record[key]
    if kind is not None and not isinstance(value, kind):
        raise LeaderboardConfigError(f"{where}: {key!r} must be {getattr(kind, '__name__', kind)}, not "
                                     f"{type(value).__name__}")
    return value


def parse_group(gid: str, record: Any, where: str) -> PinnedGroup:
    """One group of leaderboard.json, checked (its id is the sha256 of its key, its blocks are lists of ids)."""
    at = f"{where} groups.{gid}"
    if not isinstance(record, Mapping):
        raise LeaderboardConfigError(f"{at} must be a JSON object")
    bench = _need(record, "benchmark", Mapping, at)
    enc = _need(record, "encoder", Mapping, at)
    for part, name, keys in ((bench, "benchmark", ("fingerprint",)), (enc, "encoder", ("name", "config_hash"))):
        for k in keys:
            if not isinstance(part.get(k), str) or not part.get(k):
                raise LeaderboardConfigError(f"{at}.{name} lacks {k!r}")
    protocol = str(_need(record, "protocol_version", None, at))
    seg = record.get("segmenter")
    if seg is not None and (not isinstance(seg, Mapping) or not seg.get("config_hash")):
        raise LeaderboardConfigError(f"{at}.segmenter must be null or an object with a config_hash")
    blocks = _need(record, "blocks", Mapping, at)
    clean: dict[str, list[str]] = {}
    for cond, ids in blocks.items():
        if not isinstance(ids, list) or not all(isinstance(b, str) and b for b in ids):
            raise LeaderboardConfigError(f"{at}.blocks.{cond} must be a list of block ids")
        clean[str(cond)] = sorted(set(ids))
    group = PinnedGroup(gid, dict(bench), dict(enc), protocol, dict(seg) if seg else None,
                        dict(record.get("bootstrap") or {}), clean, str(record.get("anchors_run_id") or ""),
                        str(record.get("pinned_with") or ""))
    if _group_id(group.key) != gid:
        raise LeaderboardConfigError(f"{at}: the id is not the group id of its benchmark fingerprint, encoder config "
                                     f"hash and protocol ({_group_id(group.key)}): the file was edited by hand")
    return group


def parse_config(text: str, where: str = LEADERBOARD_FILE) -> LeaderboardConfig:
    """leaderboard.json's text, checked field by field.

    Raises:
        LeaderboardConfigError: naming ``where`` and the field.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise LeaderboardConfigError(f"{where} is not valid JSON ({err})") from None
    if not isinstance(data, Mapping):
        raise LeaderboardConfigError(f"{where} must hold a JSON object")
    fmt = str(data.get("format") or "")
    if fmt.split("/")[0] != FORMAT.split("/")[0] or fmt.rsplit("/", 1)[-1].split(".")[0] != FORMAT.rsplit("/", 1)[-1]:
        raise LeaderboardConfigError(f"{where}: format {fmt!r} is not {FORMAT!r}: upgrade geofidelity-bench")
    groups_raw = _need(data, "groups", Mapping, where)
    groups = {str(gid): parse_group(str(gid), rec, where) for gid, rec in groups_raw.items()}
    if not groups:
        raise LeaderboardConfigError(f"{where} pins no group: run `geofidelity-bench leaderboard init`")
    default = str(data.get("default_group") or "")
    if default not in groups:
        raise LeaderboardConfigError(f"{where}: default_group {default!r} is not one of the pinned groups "
                                     f"{sorted(groups)}")
    req = data.get("require_verified", False)
    if not isinstance(req, bool):
        raise LeaderboardConfigError(f"{where}: require_verified must be true or false")
    return LeaderboardConfig(groups, default, req, fmt)


def condition_blocks(benchmark) -> dict[str, list[str]]:
    """{prompt condition: the blocks whose prompt the benchmark can build} (docs/benchmark.md section 2):
    the group's block set of each condition, taken from the benchmark, never from a submission."""
    from ..prompts import CONDITIONS, PromptError, build_prompt

    out: dict[str, list[str]] = {}
    for cond in CONDITIONS:
        ok = []
        for block in benchmark.blocks:
            try:
                build_prompt(benchmark, block.block_id, cond)
            except PromptError:
                continue
            ok.append(block.block_id)
        out[cond] = sorted(ok)
    return out


__all__ = [
    "FORMAT",
    "LEADERBOARD_FILE",
    "MISMATCH",
    "PENDING",
    "UNVERIFIABLE",
    "VERIFICATIONS_DIR",
    "VERIFICATION_STATUSES",
    "VERIFIED",
    "LeaderboardConfig",
    "LeaderboardConfigError",
    "PinnedGroup",
    "condition_blocks",
    "parse_config",
    "parse_group",
]
