"""Read back what the trackers wrote, with each tracker's own reader where it has one:
TensorBoard's event accumulator, MLflow's client, trackio's storage (in a child
process: trackio fixes its folder at import). W&B (0.31) ships no reader of an offline
run, so its ``.wandb`` file is read here: LevelDB's log framing (32 KiB blocks,
records of checksum, length and kind) around W&B's own ``Record`` protobufs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

_BLOCK = 32768
_HEADER = 7  # checksum (4), length (2), kind (1); the file's own header is 7 bytes too
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    records, parts, pos = [], [], 7
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # the block's tail is padding
            pos += left
            continue
        checksum, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        body = data[pos + _HEADER : pos + _HEADER + length]
        if kind == 0 and length == 0:
            break
        # LevelDB's checksum covers the kind byte and the body (CRC-32 as W&B writes it).
        assert zlib.crc32(body, zlib.crc32(bytes([kind]))) == checksum, f"{path}: bad record"
        pos += _HEADER + length
        parts.append(body)
        if kind in (_FULL, _LAST):
            record = pb.Record()
            record.ParseFromString(b"".join(parts))
            records.append(record)
            parts = []
    return records


def wandb_run(folder: Path) -> dict:
    """The one offline run under ``folder``: its run record's names and its history as
    ``{key: [(step, value), ...]}``."""
    (run_file,) = Path(folder).glob("**/offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    history: dict[str, list] = {}
    for r in records:
        if r.WhichOneof("record_type") != "history":
            continue
        step = r.history.step.num
        for item in r.history.item:
            key = item.key or "/".join(item.nested_key)
            history.setdefault(key, []).append((step, json.loads(item.value_json)))
    return dict(
        id=run.run_id, name=run.display_name, project=run.project, group=run.run_group,
        history=history,
    )  # fmt: skip


def mlflow_history(uri: str, experiment: str, metric: str) -> dict[str, list]:
    """``{run name: [(step, value), ...]}`` of one metric in one experiment."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r} at {uri}"
    out = {}
    for run in client.search_runs([exp.experiment_id]):
        points = client.get_metric_history(run.info.run_id, metric)
        out[run.info.run_name] = sorted((m.step, m.value) for m in points)
    return out


def trackio_logs(trackio_dir: Path, project: str) -> dict[str, list[dict]]:
    """``{run name: [logged row, ...]}`` of a trackio project."""
    code = (
        "import json, sys\n"
        "from trackio.sqlite_storage import SQLiteStorage as S\n"
        "p = sys.argv[1]\n"
        "print(json.dumps({r: S.get_logs(p, r) for r in S.get_runs(p)}))\n"
    )
    env = {**os.environ, "TRACKIO_DIR": str(trackio_dir)}
    out = subprocess.run(
        [sys.executable, "-c", code, project], env=env, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])
