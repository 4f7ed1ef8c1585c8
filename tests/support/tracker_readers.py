"""Read what a run sent to each tracker back with that tracker's own reader, as ``{key: [(step, value)]}``.

TensorBoard: its ``EventAccumulator``. MLflow: its client. W&B: an offline run's ``.wandb`` file,
decoded with W&B's own protobuf ``Record`` (the file is a sequence of records in 32 KiB blocks, each
chunk behind a 7-byte header: checksum, length, chunk type; wandb ships no Python reader for it).
"""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from pathlib import Path


def tensorboard_scalars(log_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})  # 0: keep every point
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def tensorboard_hparams(log_dir: str | Path) -> dict[str, object]:
    """The hyperparameters of the run's HPARAMS tab (its session-start summary)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(log_dir))
    events.Reload()
    for content in events.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                    for k, v in data.session_start_info.hparams.items()}
    return {}


def mlflow_scalars(tracking_uri: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    keys = client.get_run(run_id).data.metrics
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in keys}


def mlflow_params(tracking_uri: str, run_id: str) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    return dict(MlflowClient(tracking_uri=tracking_uri).get_run(run_id).data.params)


def _wandb_records(path: Path):
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    pos, pending = 7, b""  # after the file header (":W&B", version)
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def _wandb_files(wandb_dir: str | Path, run_id: str) -> list[Path]:
    """The offline files of run ``run_id``, oldest first: ``offline-run-<time>-<id>``, with ``-1``,
    ``-2``... appended to a folder name already taken (a resume within the same second)."""
    def order(path: Path) -> tuple[str, int]:
        stamp, _, rest = path.parent.name.removeprefix("offline-run-").partition(f"-{run_id}")
        return stamp, int(rest[1:] or 0)

    return sorted(Path(wandb_dir).glob(f"offline-run-*/run-{run_id}.wandb"), key=order)


def wandb_scalars(wandb_dir: str | Path, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every history point of the offline W&B run ``run_id`` (all its offline files: a resumed run
    writes one per process), by key."""
    points: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for path in _wandb_files(wandb_dir, run_id):
        for record in _wandb_records(path):
            if record.WhichOneof("record_type") == "history":
                step = record.history.step.num
                for item in record.history.item:
                    key = item.key or "/".join(item.nested_key)
                    if not key.startswith("_"):
                        points[key].append((step, json.loads(item.value_json)))
    return dict(points)


def wandb_config(wandb_dir: str | Path, run_id: str) -> dict[str, object]:
    for path in _wandb_files(wandb_dir, run_id):
        for record in _wandb_records(path):
            if record.WhichOneof("record_type") == "run":
                return {item.key: json.loads(item.value_json)["value"] if "value" in item.value_json
                        else json.loads(item.value_json) for item in record.run.config.update}
    return {}
