"""Independent reader for the TensorBoard event files of src/obs/tensorboard_writer.cpp.

Plain Python (standard library only), sharing no code with the C++ writer: its own bitwise
CRC-32C, its own TFRecord framing parser and its own protobuf wire-format decoder for
Event / Summary / Summary.Value (field numbers from tensorflow/tensorboard
tensorboard/compat/proto/event.proto and summary.proto).

Two ways to run it:
  python3 tensorboard_reader_test.py --dump FILE
      Decodes FILE; prints one line per record (format below) and exits 0, or prints the
      first problem and exits 1. tests/obs/tensorboard_writer_test.cpp calls this via popen.
        version<TAB>file_version<TAB>wall_time
        scalar<TAB>json(tag)<TAB>step<TAB>float32 bits as 8 hex digits<TAB>wall_time
  python3 tensorboard_reader_test.py            (ctest; cwd = build dir, env MT_BIN)
      Self-checks (CRC-32C vectors, a record whose bytes were produced by python-protobuf),
      then runs the C++ test binary's fixture writer (TensorBoardWriter.WritesFixtureForPythonReader
      with MT_TB_FIXTURE_DIR set), decodes the event file it wrote and compares every scalar
      with values computed here from the same formula; checks the JSONL file with the json
      module; and flips bytes / truncates copies of the file to see that every corruption is
      caught. Exits 1 listing the failures.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


# ------------------------------------------------------------------ CRC-32C and TFRecord framing

def crc32c_bitwise(data):
    """CRC-32C, bit by bit: reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _byte_table():
    table = []
    for b in range(256):
        crc = b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _byte_table()


def crc32c(data):
    """The same CRC a byte at a time (8x faster; self_test checks it against crc32c_bitwise)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class FormatError(Exception):
    pass


def read_records(blob):
    """Splits a TFRecord file into payloads, verifying both masked CRCs of every record."""
    records = []
    pos = 0
    while pos < len(blob):
        if len(blob) - pos < 12:
            raise FormatError("truncated record header at offset %d" % pos)
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if length_crc != masked_crc32c(header):
            raise FormatError("length CRC mismatch at offset %d" % pos)
        start = pos + 12
        if len(blob) - start < length + 4:
            raise FormatError("truncated record data at offset %d (length %d)" % (pos, length))
        data = blob[start:start + length]
        (data_crc,) = struct.unpack("<I", blob[start + length:start + length + 4])
        if data_crc != masked_crc32c(data):
            raise FormatError("data CRC mismatch in record at offset %d" % pos)
        records.append(data)
        pos = start + length + 4
    return records


# ------------------------------------------------------------------ protobuf wire format

def read_varint(buf, pos):
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise FormatError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise FormatError("varint longer than 10 bytes")


def parse_fields(buf):
    """[(field_number, wire_type, raw value)] of one message; raw is int or bytes."""
    fields = []
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise FormatError("field number 0")
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise FormatError("truncated fixed64")
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise FormatError("truncated length-delimited field %d" % field)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise FormatError("truncated fixed32")
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise FormatError("unsupported wire type %d (field %d)" % (wire, field))
        fields.append((field, wire, value))
    return fields


def expect_wire(field, wire, want, what):
    if wire != want:
        raise FormatError("%s (field %d) has wire type %d, expected %d" % (what, field, wire, want))


def decode_value(buf):
    """Summary.Value: string tag = 1; float simple_value = 2."""
    out = {"tag": "", "simple_value_bits": None}
    for field, wire, value in parse_fields(buf):
        if field == 1:
            expect_wire(field, wire, 2, "Value.tag")
            out["tag"] = value.decode("utf-8")
        elif field == 2:
            expect_wire(field, wire, 5, "Value.simple_value")
            (out["simple_value_bits"],) = struct.unpack("<I", value)
        else:
            raise FormatError("unexpected Summary.Value field %d" % field)
    if out["simple_value_bits"] is None:
        raise FormatError("Summary.Value without simple_value")
    return out


def decode_event(buf):
    """Event: double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5."""
    ev = {"wall_time": 0.0, "step": 0, "file_version": None, "values": None}
    for field, wire, value in parse_fields(buf):
        if field == 1:
            expect_wire(field, wire, 1, "Event.wall_time")
            (ev["wall_time"],) = struct.unpack("<d", value)
        elif field == 2:
            expect_wire(field, wire, 0, "Event.step")
            ev["step"] = value - (1 << 64) if value >= (1 << 63) else value  # int64 two's complement
        elif field == 3:
            expect_wire(field, wire, 2, "Event.file_version")
            ev["file_version"] = value.decode("utf-8")
        elif field == 5:
            expect_wire(field, wire, 2, "Event.summary")
            ev["values"] = []
            for sfield, swire, svalue in parse_fields(value):
                if sfield != 1:
                    raise FormatError("unexpected Summary field %d" % sfield)
                expect_wire(sfield, swire, 2, "Summary.value")
                ev["values"].append(decode_value(svalue))
        else:
            raise FormatError("unexpected Event field %d" % field)
    if (ev["file_version"] is None) == (ev["values"] is None):
        raise FormatError("Event must hold exactly one of file_version and summary")
    return ev


# Our own encoder, for a canonical-form check: proto3 serializers (python-protobuf, the C++
# library) write fields in number order and leave out scalars equal to 0; oneof members and
# repeated entries are always written.
def enc_varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def enc_len(field, payload):
    return enc_varint((field << 3) | 2) + enc_varint(len(payload)) + payload


def encode_event(ev):
    out = b""
    if ev["wall_time"] != 0.0:
        out += enc_varint((1 << 3) | 1) + struct.pack("<d", ev["wall_time"])
    if ev["step"] != 0:
        out += enc_varint((2 << 3) | 0) + enc_varint(ev["step"])
    if ev["file_version"] is not None:
        out += enc_len(3, ev["file_version"].encode("utf-8"))
    else:
        summary = b""
        for v in ev["values"]:
            value = enc_len(1, v["tag"].encode("utf-8")) if v["tag"] else b""
            value += enc_varint((2 << 3) | 5) + struct.pack("<I", v["simple_value_bits"])
            summary += enc_len(1, value)
        out += enc_len(5, summary)
    return out


def frame(data):
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def decode_file(blob):
    """Events of a whole file; also checks that each record is in canonical proto3 form."""
    events = []
    for data in read_records(blob):
        ev = decode_event(data)
        if encode_event(ev) != data:
            raise FormatError("record is not in canonical proto3 form: %s" % data.hex())
        events.append(ev)
    if not events or events[0]["file_version"] is None:
        raise FormatError("first record is not a file_version event")
    if not events[0]["file_version"].startswith("brain.Event:"):
        raise FormatError("file_version %r does not start with brain.Event:" % events[0]["file_version"])
    return events


def dump(path):
    with open(path, "rb") as f:
        blob = f.read()
    try:
        events = decode_file(blob)
    except (FormatError, UnicodeDecodeError) as e:
        print("error: %s: %s" % (path, e))
        return 1
    for ev in events:
        if ev["file_version"] is not None:
            print("version\t%s\t%r" % (ev["file_version"], ev["wall_time"]))
        else:
            for v in ev["values"]:
                print("scalar\t%s\t%d\t%08x\t%r" % (json.dumps(v["tag"]), ev["step"], v["simple_value_bits"],
                                                   ev["wall_time"]))
    return 0


# ------------------------------------------------------------------ expected fixture content

# Must match WritesFixtureForPythonReader in tensorboard_writer_test.cpp.
MEGATRON_TAGS = [
    "learning-rate", "learning-rate vs samples", "batch-size", "batch-size vs samples",
    "lm loss", "lm loss vs samples", "loss-scale", "loss-scale vs samples",
    "grad-norm", "grad-norm vs samples", "num-zeros", "num-zeros vs samples",
    "params-norm", "params-norm vs samples", "iteration-time", "throughput",
    "lm loss validation", "lm loss validation vs samples", "lm loss validation ppl",
    "lm loss validation ppl vs samples",
]
FIXTURE_ITERATIONS = 12
FIXTURE_GLOBAL_BATCH = 64
FIXTURE_WALL_TIME = 1700000000.5
INF = float("inf")
SPECIALS = [  # (tag, step, value as a double)
    ("special/tenth", 1, 0.1),
    ("special/nan", 2, float("nan")),
    ("special/inf", 3, INF),
    ("special/neg_inf", 4, -INF),
    ("special/zero", 0, 0.0),
    ("special/negative_step", -5, -2.5),
    ("special/big_step", (1 << 40) + 3, 3.0e38),
    ("special/float_overflow", 6, 1.0e39),
    ("special/denormal", 7, 1.0e-45),
    ("special/" + "x" * 200, 8, 1.0),
    ("\u635f\u5931/unicode \"quoted\"", 9, 123.456),
]


def fixture_scalars():
    out = []
    for it in range(1, FIXTURE_ITERATIONS + 1):
        for k, tag in enumerate(MEGATRON_TAGS):
            step = it * FIXTURE_GLOBAL_BATCH if tag.endswith(" vs samples") else it
            out.append((tag, step, k * 1.5 + it * 0.25))  # exact in binary
    return out + SPECIALS


def float32_bits(x):
    if math.isnan(x):
        return None  # any NaN
    if abs(x) > 3.4028234663852886e38:
        # C++ static_cast<float> rounds to nearest: beyond FLT_MAX + half an ulp it is inf.
        return 0x7F800000 if x > 0 else 0xFF800000
    return struct.unpack("<I", struct.pack("<f", x))[0]


# ------------------------------------------------------------------ self-test and fixture test

def self_test():
    check(crc32c(b"123456789") == 0xE3069283, "crc32c('123456789')")
    # RFC 3720 appendix B.4.
    check(crc32c(bytes(32)) == 0x8A9136AA, "crc32c(32 zero bytes)")
    check(crc32c(b"\xff" * 32) == 0x62A8AB43, "crc32c(32 0xff bytes)")
    check(crc32c(bytes(range(32))) == 0x46DD794E, "crc32c(0..31)")
    check(crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C, "crc32c(31..0)")
    sample = bytes((i * 37 + 11) & 0xFF for i in range(1000))
    check(crc32c(sample) == crc32c_bitwise(sample) and crc32c_bitwise(b"123456789") == 0xE3069283,
          "table and bitwise CRC-32C agree")
    # Event{wall_time 1700000000.5, step 42, summary{value{tag "lm loss", simple_value 2.5}}},
    # serialized by python-protobuf and framed (docs/megatron-formats.md, "TensorBoard event
    # files").
    record = bytes.fromhex("1d00000000000000" "602fdf23"
                           "09000020 40fc54d941 102a 2a100a0e0a076c6d206c6f737315 00002040".replace(" ", "")
                           + "f7147a84")
    version = {"wall_time": 1.0, "step": 0, "file_version": "brain.Event:2", "values": None}
    try:
        ev = decode_file(frame(encode_event(version)) + record)[1]
        check(ev["wall_time"] == 1700000000.5 and ev["step"] == 42, "reference record: wall_time/step")
        check(ev["values"] == [{"tag": "lm loss", "simple_value_bits": float32_bits(2.5)}], "reference record: value")
        check(frame(encode_event(ev)) == record, "reference record: our encoder reproduces its bytes")
    except FormatError as e:
        check(False, "reference record does not decode: %s" % e)


def find_test_binary():
    name = "obs_tensorboard_writer_test"
    dirs = [os.getcwd()]
    if os.environ.get("MT_BIN"):
        dirs.append(os.path.dirname(os.environ["MT_BIN"]))
    for d in dirs:
        for cand in (os.path.join(d, "tests", name), os.path.join(d, name)):
            if os.access(cand, os.X_OK):
                return cand
    return None


def check_fixture_events(events):
    scalars = []
    for ev in events[1:]:
        check(ev["file_version"] is None, "only the first record carries file_version")
        check(ev["values"] is not None and len(ev["values"]) == 1, "one value per scalar event")
        check(ev["wall_time"] == FIXTURE_WALL_TIME, "fixture wall_time")
        for v in ev["values"] or []:
            scalars.append((v["tag"], ev["step"], v["simple_value_bits"]))
    expected = fixture_scalars()
    check(len(scalars) == len(expected), "fixture has %d scalars, expected %d" % (len(scalars), len(expected)))
    for (tag, step, bits), (etag, estep, evalue) in zip(scalars, expected):
        want = float32_bits(evalue)
        ok = tag == etag and step == estep
        if want is None:  # NaN: exponent all ones, mantissa non-zero
            ok = ok and (bits & 0x7F800000) == 0x7F800000 and (bits & 0x007FFFFF) != 0
        else:
            ok = ok and bits == want
        check(ok, "scalar (%r, %d, %08x) != expected (%r, %d, %r)" % (tag, step, bits, etag, estep, evalue))


def check_fixture_jsonl(path):
    with open(path, "rb") as f:
        raw = f.read()
    check(raw.endswith(b"\n"), "JSONL ends with a newline")
    lines = raw.decode("utf-8").split("\n")[:-1]
    expected = fixture_scalars()
    check(len(lines) == len(expected) + 1, "JSONL has %d lines, expected %d" % (len(lines), len(expected) + 1))
    for line, (tag, step, value) in zip(lines, expected):
        obj = json.loads(line)
        check(list(obj.keys()) == ["tag", "step", "value"], "JSONL key order: %s" % line)
        want = value if math.isfinite(value) else None
        check(obj == {"tag": tag, "step": step, "value": want}, "JSONL line %s != %r" % (line, (tag, step, want)))
        if want is not None:
            check(type(obj["value"]) is float, "JSONL doubles stay floats: %s" % line)
    mixed = json.loads(lines[-1])
    check(mixed == {"iteration": 10, "consumed_samples": 640, "lr": 1.5e-4, "lm_loss": 10.5, "grad_norm": None,
                    "skipped": False, "note": "quote\" backslash\\ newline\n tab\t ctrl\x01 \u635f\u5931",
                    "big": (1 << 62) + 1, "neg": -7, "whole": 640.0, "third": 1.0 / 3.0},
          "mixed JSONL line: %s" % lines[-1])
    check(type(mixed.get("whole")) is float and type(mixed.get("iteration")) is int, "JSONL int vs float types")
    check('"lr": 0.00015' in lines[-1], "lr printed in its shortest round-trip form: %s" % lines[-1])


def check_corruptions(blob):
    """Bit flips in every part of a record (in the first, a middle and the last two records)
    and truncations must all be rejected."""
    starts = []
    pos = 0
    while pos < len(blob):
        (length,) = struct.unpack("<Q", blob[pos:pos + 8])
        starts.append((pos, length))
        pos += 12 + length + 4
    n_records = len(starts)
    positions = []
    for pos, length in [starts[0], starts[1], starts[n_records // 2], starts[-2], starts[-1]]:
        end = pos + 12 + length + 4
        # first length byte, length CRC, first/last data byte, data CRC
        positions += [pos, pos + 9, pos + 12, pos + 12 + length - 1, end - 2]
    caught = 0
    for p in positions:
        for mask in (0x01, 0x80):
            bad = bytearray(blob)
            bad[p] ^= mask
            try:
                decode_file(bytes(bad))
            except (FormatError, UnicodeDecodeError):
                caught += 1
    check(caught == 2 * len(positions), "byte flips caught: %d of %d" % (caught, 2 * len(positions)))
    for cut in (1, 4, 11, 13, len(blob) // 2):
        try:
            decode_file(blob[:len(blob) - cut])
            check(False, "truncation by %d bytes not caught" % cut)
        except FormatError:
            pass
    return n_records


def fixture_test():
    binary = find_test_binary()
    if binary is None:
        check(False, "obs_tensorboard_writer_test binary not found (build it first)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, MT_TB_FIXTURE_DIR=tmp)
        r = subprocess.run([binary, "--gtest_filter=TensorBoardWriter.WritesFixtureForPythonReader"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        check(r.returncode == 0, "fixture writer failed:\n" + r.stdout)
        tb_dir = os.path.join(tmp, "tb")
        files = sorted(os.listdir(tb_dir)) if os.path.isdir(tb_dir) else []
        check(len(files) == 1 and files[0].startswith("events.out.tfevents."), "one event file: %s" % files)
        if len(files) != 1:
            return
        with open(os.path.join(tb_dir, files[0]), "rb") as f:
            blob = f.read()
        try:
            events = decode_file(blob)
        except (FormatError, UnicodeDecodeError) as e:
            check(False, "fixture event file does not decode: %s" % e)
            return
        check(events[0]["file_version"] == "brain.Event:2", "file_version is brain.Event:2")
        check_fixture_events(events)
        check_fixture_jsonl(os.path.join(tmp, "metrics.jsonl"))
        n = check_corruptions(blob)
        print("decoded %d records (%d scalars), %d bytes" % (len(events), len(events) - 1, len(blob)))
        check(n == len(events), "record count")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        return dump(sys.argv[2])
    if len(sys.argv) != 1:
        print(__doc__)
        return 2
    self_test()
    fixture_test()
    if FAILURES:
        print("%d failure(s)" % len(FAILURES), file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
