#!/usr/bin/env python3
"""tb_read.py - read a ddpc TensorBoard event directory with TensorBoard itself.

    tb_read.py EVENT_DIR TAG=STEP:VALUE[,STEP:VALUE...] ...

Loads EVENT_DIR with tensorboard's EventAccumulator (the reader the
TensorBoard UI uses) and checks that the scalar tags are exactly the TAGs
given, each with exactly these steps and values (float32 tolerance).
Exit 0: all match. Exit 1: a mismatch (printed). Exit 77: the tensorboard
package is not installed, so the caller (tests/test_metrics.c) can SKIP.
Run by test_metrics.c; never needs the network.
"""
import math
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as exc:  # only a missing package means "skip"
    print("tb_read: cannot import tensorboard: %s" % exc)
    sys.exit(77)


def parse_expect(args):
    expect = {}
    for arg in args:
        tag, _, points = arg.partition("=")
        pairs = []
        for p in points.split(","):
            step, _, value = p.partition(":")
            pairs.append((int(step), float(value)))
        expect[tag] = pairs
    return expect


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    expect = parse_expect(sys.argv[2:])
    acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})  # 0: keep all
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    bad = 0
    if tags != sorted(expect):
        print("tb_read: scalar tags %s, expected %s" % (tags, sorted(expect)))
        bad += 1
    for tag, pairs in sorted(expect.items()):
        if tag not in tags:
            continue
        got = [(s.step, s.value, s.wall_time) for s in acc.Scalars(tag)]
        if [g[0] for g in got] != [p[0] for p in pairs]:
            print("tb_read: %s steps %s, expected %s" % (tag, [g[0] for g in got],
                                                          [p[0] for p in pairs]))
            bad += 1
            continue
        for (step, value, wall), (_, want) in zip(got, pairs):
            if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-7):
                print("tb_read: %s step %d value %r, expected %r" % (tag, step, value, want))
                bad += 1
            if not wall > 1e9:  # Unix time, not a monotonic clock
                print("tb_read: %s step %d wall_time %r is not Unix time" % (tag, step, wall))
                bad += 1
    if bad:
        return 1
    print("tb_read: OK, %d tags read back by tensorboard" % len(tags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
