#!/usr/bin/env python3
"""Reads megatron.cpp TensorBoard event files with the real TensorBoard package.

For a machine with `pip install tensorboard` (no TensorFlow needed). Loads the file (or every
event file of a directory) with
tensorboard.backend.event_processing.event_accumulator.EventAccumulator, prints every scalar
tag with its (step, value) pairs, and exits 1 if an expectation fails.

  # after a training run with --tensorboard-dir DIR
  python3 bench/tensorboard_check.py DIR --megatron-train [--megatron-valid]
  python3 bench/tensorboard_check.py DIR --expect-tag "lm loss" --expect "lm loss@10=9.8765"

  # the writer's test fixture (every Megatron tag for 12 iterations plus NaN/inf/denormal,
  # negative and 2^40 steps, a 208-byte tag, a UTF-8 tag): build/tests/train_tensorboard_writer_test
  python3 bench/tensorboard_check.py --fixture build-gpu/tests/train_tensorboard_writer_test
  # or on files that test wrote elsewhere (MT_TB_FIXTURE_DIR=DIR, filter WritesFixtureForPythonReader)
  python3 bench/tensorboard_check.py --fixture-dir DIR

--megatron-train requires the tags a plain Megatron GPT run writes every
--tensorboard-log-interval (src/obs/tensorboard_tags.h): learning-rate, lm loss, loss-scale,
grad-norm, each also "... vs samples" with the same values; iteration steps must increase.
--megatron-valid requires "lm loss validation" and "lm loss validation vs samples" (steps may
repeat once: the final evaluation is written at the last iteration, as Megatron does).
Values are stored as float32 (simple_value), so --expect compares with float32 rounding.
"""
import argparse
import importlib.util
import math
import os
import struct
import subprocess
import sys
import tempfile

# batch-size only with --log-batch-size-to-tensorboard (add it with --expect-tag).
MEGATRON_TRAIN_PAIRS = ["learning-rate", "lm loss", "loss-scale", "grad-norm"]
MEGATRON_VALID_PAIRS = ["lm loss validation"]


def load_scalars(path):
    """{tag: [(step, value, wall_time)]} as TensorBoard's EventAccumulator sees it."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] for tag in acc.Tags()[ea.SCALARS]}


def f32(x):
    if math.isnan(x) or math.isinf(x):
        return x
    if abs(x) > 3.4028235677973366e38:  # beyond FLT_MAX + half an ulp: rounds to inf
        return math.copysign(math.inf, x)
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same_value(got, want):
    """got (float32 read back by TensorBoard) equals want rounded to float32."""
    w = f32(want)
    if math.isnan(w):
        return math.isnan(got)
    return got == w


def print_scalars(scalars, limit):
    for tag in sorted(scalars):
        points = scalars[tag]
        shown = points if limit <= 0 or len(points) <= limit else points[:limit // 2] + [None] + points[-(limit // 2):]
        print("%s  (%d points)" % (tag, len(points)))
        print("   " + " ".join("..." if p is None else "(%d, %.7g)" % (p[0], p[1]) for p in shown))


class Checker:
    def __init__(self):
        self.failures = []

    def check(self, cond, what):
        if not cond:
            self.failures.append(what)
            print("FAIL:", what, file=sys.stderr)


def check_pairs(scalars, names, ck, strictly_increasing=True):
    for name in names:
        for tag in (name, name + " vs samples"):
            ck.check(tag in scalars and scalars[tag], "tag %r missing" % tag)
        if name in scalars and name + " vs samples" in scalars:
            a, b = scalars[name], scalars[name + " vs samples"]
            ck.check(len(a) == len(b) and all(x[1] == y[1] or (math.isnan(x[1]) and math.isnan(y[1]))
                                              for x, y in zip(a, b)),
                     "%r and %r hold different values" % (name, name + " vs samples"))
            # Validation may repeat the last step: Megatron's final evaluation after training is
            # written at the same iteration as a periodic one that falls on the last iteration.
            ok = (lambda s, t: s < t) if strictly_increasing else (lambda s, t: s <= t)
            steps = [p[0] for p in a]
            ck.check(all(ok(s, t) for s, t in zip(steps, steps[1:])), "%r: iteration steps do not increase" % name)
            samples = [p[0] for p in b]
            ck.check(all(ok(s, t) for s, t in zip(samples, samples[1:])), "%r: sample steps do not increase" % name)


def parse_expect(text):
    """'TAG@STEP=VALUE' (TAG may contain '@' or '='; the last ones split)."""
    head, value = text.rsplit("=", 1)
    tag, step = head.rsplit("@", 1)
    return tag, int(step), float(value)


def load_reader_module():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(
        "tensorboard_reader_test", os.path.join(here, "..", "tests", "train", "tensorboard_reader_test.py"))
    reader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reader)
    return reader


def check_fixture_dir(fixture_dir, ck):
    """Every tag of the fixture holds exactly the (step, value) list the formula gives."""
    reader = load_reader_module()
    scalars = load_scalars(os.path.join(fixture_dir, "tb"))
    print_scalars(scalars, 8)
    expected = {}
    for tag, step, value in reader.fixture_scalars():
        expected.setdefault(tag, []).append((step, value))
    ck.check(sorted(scalars) == sorted(expected),
             "tags differ: missing %s, extra %s" % (sorted(set(expected) - set(scalars)),
                                                     sorted(set(scalars) - set(expected))))
    for tag, want in expected.items():
        got = scalars.get(tag, [])
        ok = len(got) == len(want) and all(g[0] == w[0] and same_value(g[1], w[1]) for g, w in zip(got, want))
        ck.check(ok, "%r: got %s, expected %s" % (tag, [(g[0], g[1]) for g in got][:6], want[:6]))
        ck.check(all(g[2] == reader.FIXTURE_WALL_TIME for g in got), "%r: wall_time" % tag)
    n = sum(len(v) for v in scalars.values())
    print("fixture: %d tags, %d scalars read by EventAccumulator" % (len(scalars), n))


def run_fixture(binary, ck):
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([binary, "--gtest_filter=TensorBoardWriter.WritesFixtureForPythonReader"],
                           env=dict(os.environ, MT_TB_FIXTURE_DIR=tmp), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True)
        ck.check(r.returncode == 0, "fixture writer failed:\n" + r.stdout)
        check_fixture_dir(tmp, ck)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", help="an events.out.tfevents.* file or a directory of them")
    ap.add_argument("--fixture", metavar="TEST_BINARY", help="check the writer test's fixture instead of PATH")
    ap.add_argument("--fixture-dir", metavar="DIR",
                    help="check a fixture already written (MT_TB_FIXTURE_DIR=DIR TEST_BINARY "
                         "--gtest_filter=TensorBoardWriter.WritesFixtureForPythonReader)")
    ap.add_argument("--expect-tag", action="append", default=[], metavar="TAG")
    ap.add_argument("--expect", action="append", default=[], metavar="TAG@STEP=VALUE")
    ap.add_argument("--megatron-train", action="store_true")
    ap.add_argument("--megatron-valid", action="store_true")
    ap.add_argument("--show", type=int, default=0, help="points shown per tag (0 = all)")
    args = ap.parse_args()
    ck = Checker()

    if args.fixture:
        run_fixture(args.fixture, ck)
    elif args.fixture_dir:
        check_fixture_dir(args.fixture_dir, ck)
    else:
        if not args.path:
            ap.error("PATH or --fixture is required")
        scalars = load_scalars(args.path)
        print_scalars(scalars, args.show)
        ck.check(scalars, "no scalar tags in %s" % args.path)
        for tag in args.expect_tag:
            ck.check(tag in scalars and scalars[tag], "tag %r missing" % tag)
        for text in args.expect:
            tag, step, value = parse_expect(text)
            points = [p for p in scalars.get(tag, []) if p[0] == step]
            ck.check(points and same_value(points[-1][1], value),
                     "%s: found %s" % (text, [p[1] for p in points] if points else "no point"))
        if args.megatron_train:
            check_pairs(scalars, MEGATRON_TRAIN_PAIRS, ck)
        if args.megatron_valid:
            check_pairs(scalars, MEGATRON_VALID_PAIRS, ck, strictly_increasing=False)

    if ck.failures:
        print("%d failure(s)" % len(ck.failures), file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
