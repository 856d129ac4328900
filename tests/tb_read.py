#!/usr/bin/env python3
"""tb_read.py - read a ddpc TensorBoard event directory back.

    tb_read.py EVENT_DIR TAG=STEP:VALUE[,STEP:VALUE...] ...

Reads EVENT_DIR and checks that the scalar tags are exactly the TAGs given,
each with exactly these steps and values (float32 tolerance) and Unix wall
times. The reader is tensorboard's EventAccumulator (the one the TensorBoard
UI uses) where that package is installed; Debian has no tensorboard package,
so otherwise it is the reader below, written from the formats' definitions:
TFRecord framing (u64 length, masked CRC-32C of the length, data, masked
CRC-32C of the data; every CRC checked) around Event protobufs (wall_time
1: double, step 2: int64, file_version 3: string, summary 5: Summary), a
Summary holding Values (tag 1: string, simple_value 2: float). It is
independent of ddpc's writer (metrics.c): stdlib only.
Exit 0: all match. Exit 1: a mismatch (printed). Run by test_metrics.c and
test_faults.c; never needs the network.
"""
import glob
import math
import os
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


_CRC = _crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _CRC[(c ^ b) & 0xFF]
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The data of each TFRecord in path, CRCs checked."""
    with open(path, "rb") as f:
        blob = f.read()
    i = 0
    while i < len(blob):
        assert i + 12 <= len(blob), "%s: truncated record header at %d" % (path, i)
        head = blob[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (lcrc,) = struct.unpack("<I", blob[i + 8:i + 12])
        assert lcrc == masked_crc32c(head), "%s: bad length CRC at %d" % (path, i)
        data = blob[i + 12:i + 12 + n]
        assert len(data) == n and i + 16 + n <= len(blob), "%s: truncated record" % path
        (dcrc,) = struct.unpack("<I", blob[i + 12 + n:i + 16 + n])
        assert dcrc == masked_crc32c(data), "%s: bad data CRC at %d" % (path, i)
        yield data
        i += 16 + n


def fields(buf):
    """(field number, value) of each field of a protobuf message: varints as
    int, 64-bit as 8 bytes, length-delimited as bytes, 32-bit as 4 bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield num, v


def _varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


class Scalar:
    def __init__(self, step, value, wall_time):
        self.step, self.value, self.wall_time = step, value, wall_time


def read_scalars(event_dir):
    """{tag: [Scalar, ...]} of every event file in event_dir, in file order."""
    out = {}
    files = sorted(glob.glob(os.path.join(event_dir, "*tfevents*")))
    assert files, "no event files in %s" % event_dir
    for path in files:
        version = None
        for rec in records(path):
            wall, step, summary = 0.0, 0, None
            for num, v in fields(rec):
                if num == 1:
                    (wall,) = struct.unpack("<d", v)
                elif num == 2:
                    step = v - (1 << 64) if v >= 1 << 63 else v
                elif num == 3:
                    version = v.decode()
                elif num == 5:
                    summary = v
            if summary is None:
                continue
            for num, value in fields(summary):
                if num != 1:
                    continue
                tag, simple = None, None
                for vn, vv in fields(value):
                    if vn == 1:
                        tag = vv.decode()
                    elif vn == 2:
                        (simple,) = struct.unpack("<f", vv)
                if tag is not None and simple is not None:
                    out.setdefault(tag, []).append(Scalar(step, simple, wall))
        assert version == "brain.Event:2", "%s: file_version %r" % (path, version)
    return out


def load(event_dir):
    """{tag: [Scalar, ...]} and the name of the reader that produced it."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return read_scalars(event_dir), "tb_read.py's TFRecord reader"
    acc = EventAccumulator(event_dir, size_guidance={"scalars": 0})  # 0: keep all
    acc.Reload()
    return {t: acc.Scalars(t) for t in acc.Tags()["scalars"]}, "tensorboard"


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
    scalars, reader = load(sys.argv[1])
    tags = sorted(scalars)
    bad = 0
    if tags != sorted(expect):
        print("tb_read: scalar tags %s, expected %s" % (tags, sorted(expect)))
        bad += 1
    for tag, pairs in sorted(expect.items()):
        if tag not in tags:
            continue
        got = [(s.step, s.value, s.wall_time) for s in scalars[tag]]
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
    print("tb_read: OK, %d tags read back by %s" % (len(tags), reader))
    return 0


if __name__ == "__main__":
    sys.exit(main())
