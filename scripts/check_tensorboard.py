#!/usr/bin/env python3
"""Reads the TensorBoard event files of train-example runs with TensorBoard's own reader
(EventAccumulator) and checks them against each run's records: every tag, step and value of
`metrics.jsonl` (training values per optimiser step, micro-batches averaged by their counts;
each validation's final values) and of `tracking.jsonl` (per-layer values), each step once, the
settings as text. With --torn, also reads copies of each event file cut at random bytes: they
must read without error, every point read being the run's.

    python3 scripts/check_tensorboard.py [--torn N] RUN_DIR...

Needs `pip install tensorboard`. Exits 1 naming the first difference.
"""
import argparse
import json
import math
import random
import shutil
import struct
import sys
import tempfile
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def tag(split, metric):
    """`train/learning_rate` for burn-train's `Learning Rate` in `train` (the documented rule)."""
    name = ""
    for c in metric.strip():
        if c.isascii() and c.isalnum():
            name += c.lower()
        elif name and not name.endswith("_"):
            name += "_"
    return f"{split}/{name.rstrip('_')}"


def expected_points(run):
    """{(tag, step): value} from the run's own records."""
    points = {}
    sums = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        value = math.nan if row["value"] is None else row["value"]
        key = (tag(row["split"], row["metric"]), row["step"])
        final = row.get("final", False)
        if row["split"] == "train" and not final:
            count = row.get("count")
            if count == 0:
                continue
            if count is None:
                points[key] = value
            else:
                total, weight = sums.get(key, (0.0, 0))
                sums[key] = (total + value * count, weight + count)
        elif row["split"] != "train" and final:
            points[key] = value
    for key, (total, weight) in sums.items():
        points[key] = total / weight
    tracking = run / "tracking.jsonl"
    if tracking.exists():
        for line in tracking.read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            width = len(str(max(len(record["block_output_variance"]), 10)))
            for quantity, first, values in [
                ("output_variance", 0, record["block_output_variance"]),
                ("attention_variance", 1, record["after_attention_variance"]),
                ("grad_norm", 1, record["grad_norm"]),
                ("max_activation", 0, record.get("max_abs_activation", [])),
            ]:
                for index, value in enumerate(values):
                    key = (f"layers/{quantity}/{first + index:0{width}d}", record["step"])
                    points[key] = math.nan if value is None else value
    return points


def read_points(events_dir):
    """{(tag, step): value} as TensorBoard reads `events_dir`, each step once per tag."""
    accumulator = EventAccumulator(str(events_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    points = {}
    for name in accumulator.Tags()["scalars"]:
        steps = [event.step for event in accumulator.Scalars(name)]
        if steps != sorted(set(steps)):
            raise AssertionError(f"{events_dir}: {name}: steps repeated or out of order: {steps}")
        for event in accumulator.Scalars(name):
            points[(name, event.step)] = event.value
    return points, accumulator


def same(expected, actual):
    # JSON writes every non-finite value as null (read as NaN): the event file holds the value
    # itself (inf or NaN) where it was written live, NaN where it was written from the records.
    if math.isnan(expected):
        return not math.isfinite(actual)
    as_f32 = struct.unpack("f", struct.pack("f", expected))[0] if math.isfinite(expected) else expected
    return as_f32 == actual or math.isclose(expected, actual, rel_tol=1e-6, abs_tol=1e-30)


def check(run, torn):
    run = Path(run)
    expected = expected_points(run)
    events_dir = run / "tensorboard"
    files = [f for f in events_dir.iterdir() if "tfevents" in f.name] if events_dir.is_dir() else []
    if len(files) != 1:
        raise AssertionError(f"{run}: expected one event file in {events_dir}, found {files}")
    actual, accumulator = read_points(events_dir)
    for required in ["train/loss", "valid/loss"]:
        if not any(name == required for name, _ in actual):
            raise AssertionError(f"{run}: no {required} in the event file")
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    if missing or extra:
        raise AssertionError(f"{run}: points missing {missing[:5]} (of {len(missing)}), extra {extra[:5]} (of {len(extra)})")
    for key, value in expected.items():
        if not same(value, actual[key]):
            raise AssertionError(f"{run}: {key}: metrics say {value}, TensorBoard reads {actual[key]}")
    settings = accumulator.Tensors("settings")[0].tensor_proto.string_val[0].decode()
    if json.loads((run / "train.json").read_text()) != json.loads(settings.strip("`\n").removeprefix("json\n")):
        raise AssertionError(f"{run}: the settings text is not train.json")
    print(f"{run}: {len(actual)} points over {len({name for name, _ in actual})} tags equal the run's records")
    data = files[0].read_bytes()
    rng = random.Random(0)
    for _ in range(torn):
        cut = rng.randrange(1, len(data))
        with tempfile.TemporaryDirectory() as scratch:
            shutil.copy(files[0], scratch)
            Path(scratch, files[0].name).write_bytes(data[:cut])
            read, _ = read_points(scratch)
        wrong = [key for key, value in read.items() if key not in expected or not same(expected[key], value)]
        if wrong:
            raise AssertionError(f"{run}: cut at byte {cut}: points that are not the run's: {wrong[:5]}")
    if torn:
        print(f"{run}: {torn} copies cut at random bytes read back, every point the run's")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torn", type=int, default=0, help="copies cut at random bytes to read back")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    try:
        for run in args.runs:
            check(run, args.torn)
    except AssertionError as e:
        print(f"check_tensorboard: {e}", file=sys.stderr)
        sys.exit(1)
    except (OSError, ValueError, KeyError) as e:
        print(f"check_tensorboard: cannot read the run's records: {e!r}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
