"""The .amkb half of the bad-input corpus (imported by make_corpus.py).

Each case starts from `amk convert` of a valid program and damages one thing. Where a check sits
behind the checksums, the case fixes the CRC-32Cs again so the reader reaches it. The generator
asserts that amk gives the intended error code, and records the location amk names.
"""
import json
import os
import struct
import subprocess
import tempfile

HEADER = 64
ENTRY = 32
KIND = {1: "META", 2: "INSTR", 3: "QUEUES", 4: "DATA"}


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_T = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def sections(blob):
    count = struct.unpack_from("<I", blob, 28)[0]
    out = {}
    for i in range(count):
        kind, _flags, off, size = struct.unpack_from("<IIQQ", blob, HEADER + i * ENTRY)
        out[KIND.get(kind, kind)] = (i, off, size)
    return out


def fix_crcs(blob):
    b = bytearray(blob)
    count = struct.unpack_from("<I", b, 28)[0]
    for i in range(count):
        e = HEADER + i * ENTRY
        _kind, _flags, off, size = struct.unpack_from("<IIQQ", b, e)
        if off + size <= len(b):
            struct.pack_into("<I", b, e + 24, crc32c(b[off:off + size]))
    struct.pack_into("<I", b, 52, crc32c(b[HEADER:HEADER + count * ENTRY]))
    struct.pack_into("<I", b, 60, crc32c(b[:60]))
    return bytes(b)


def fix_header_crc(blob):
    b = bytearray(blob)
    struct.pack_into("<I", b, 60, crc32c(b[:60]))
    return bytes(b)


def instr_field(blob, index, field_offset, fmt, value):
    _i, off, _size = sections(blob)["INSTR"]
    b = bytearray(blob)
    struct.pack_into(fmt, b, off + 256 * index + field_offset, value)
    return fix_crcs(b)


def patch(blob, offset, fmt, value, fix=True):
    b = bytearray(blob)
    struct.pack_into(fmt, b, offset, value)
    return fix_crcs(b) if fix else bytes(b)


def entry_field(blob, name, field_offset, fmt, value):
    i, _off, _size = sections(blob)[name]
    return patch(blob, HEADER + i * ENTRY + field_offset, fmt, value)


def queue_items_swapped(blob):
    """Puts s0 (waits on g0) before g0 in one queue: a deadlock the loader cannot see."""
    _i, off, size = sections(blob)["QUEUES"]
    b = bytearray(blob)
    n_q, n_items = struct.unpack_from("<II", b, off)
    # two queues [g0] [s0] -> one queue [s0, g0] and an empty one
    struct.pack_into("<III", b, off + 8, 0, 2, 2)
    struct.pack_into("<II", b, off + 8 + 4 * (n_q + 1), 1, 0)
    return fix_crcs(b)


def generate(amk, here, base):
    os.makedirs(os.path.join(here, "amkb"), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "base.json")
        json.dump(base, open(src, "w"))
        good = os.path.join(tmp, "base.amkb")
        subprocess.run([amk, "-q", "convert", src, "-o", good], check=True)
        blob = open(good, "rb").read()
        custom = dict(base)
        custom["custom_ops"] = [{"name": "my_op", "operands": ["x"], "params": [], "source": "__device__ void f() {}"}]
        csrc = os.path.join(tmp, "custom.json")
        json.dump(custom, open(csrc, "w"))
        cgood = os.path.join(tmp, "custom.amkb")
        subprocess.run([amk, "-q", "convert", csrc, "-o", cgood, "--trust-custom-ops"], check=True)
        cblob = open(cgood, "rb").read()

    secs = sections(blob)
    g0 = 0
    cases = [
        ("truncated_header", blob[:30], "amkb.truncated"),
        ("truncated_half", blob[: len(blob) // 2], "amkb.truncated"),
        ("truncated_last_byte", blob[:-1], "amkb.truncated"),
        ("bad_magic_tail", patch(blob, 5, "<B", 0x41, fix=False), "amkb.magic"),
        ("version_2", patch(blob, 8, "<I", 2), "amkb.version"),
        ("big_endian", patch(blob, 12, "<I", 0x04030201), "amkb.endian"),
        ("header_checksum", patch(blob, 56, "<I", 7, fix=False), "amkb.checksum"),
        ("header_reserved_nonzero", patch(blob, 56, "<I", 7), "amkb.header"),
        ("section_count_huge", fix_header_crc(patch(blob, 28, "<I", 0xFFFFFFFF, fix=False)), "amkb.header"),
        ("file_bytes_short", patch(blob, 40, "<Q", len(blob) - 32), "amkb.header"),
        ("section_past_end", entry_field(blob, "INSTR", 16, "<Q", 1 << 60), "amkb.section"),
        ("section_overlap", entry_field(blob, "INSTR", 8, "<Q", secs["META"][1]), "amkb.section"),
        ("section_unknown_kind", entry_field(blob, "QUEUES", 0, "<I", 9), "amkb.section"),
        ("section_reserved_nonzero", entry_field(blob, "QUEUES", 28, "<I", 1), "amkb.section"),
        ("section_checksum", patch(blob, secs["INSTR"][1] + 20, "<B", 0x5A, fix=False), "amkb.checksum"),
        ("unknown_op", instr_field(blob, g0, 0, "<H", 999), "ref.op"),
        ("retired_op", instr_field(blob, g0, 0, "<H", 16), "op.retired"),  # gemv_splitk's id
        ("operand_count", instr_field(blob, g0, 2, "<B", 2), "amkb.instruction"),
        ("wrong_index", instr_field(blob, 1, 8, "<I", 5), "amkb.instruction"),
        ("reserved_nonzero", instr_field(blob, g0, 12, "<I", 1), "amkb.instruction"),
        ("operand_buffer_range", instr_field(blob, g0, 16 + 12, "<I", 40), "ref.buffer"),
        ("operand_offset_overflow", instr_field(blob, g0, 16, "<Q", (1 << 64) - 8), "amkb.instruction"),
        ("signal_counter_range", instr_field(blob, g0, 144, "<I", 77), "ref.counter"),
        ("too_many_waits", instr_field(blob, 1, 3, "<B", 9), "amkb.instruction"),
        ("queue_item_range", patch(blob, secs["QUEUES"][1] + 8 + 4 * 3 + 4, "<I", 1000), "ref.instruction"),
        ("deadlocked_queues", queue_items_swapped(blob), "verify.deadlock"),
        ("unordered_race", instr_field(blob, 1, 3, "<B", 0), "amkb.instruction"),
        ("operand_out_of_bounds", instr_field(blob, 1, 16, "<Q", 60), "verify.operand.bounds"),
        ("custom_untrusted", cblob, "custom.untrusted"),
    ]
    rows = []
    for name, data, want in cases:
        fname = os.path.join("amkb", name + ".amkb")
        path = os.path.join(here, fname)
        with open(path, "wb") as f:
            f.write(data)
        r = subprocess.run([amk, "--json", "validate", path], capture_output=True, text=True)
        j = json.loads(r.stdout)
        err = j["programs"][0].get("error", {})
        if err.get("code") != want:
            raise SystemExit(f"{fname}: intended {want}, amk says {err.get('code')} at {err.get('where')}: {err.get('message')}")
        rows.append(("validate", fname, r.returncode, want, err["where"]))
    return rows


def generate_wrapper(amk, here, base):
    """Wrapper .amkb cases (schemas/wrapper.md, "Binary encoding"): `amk convert` of a small
    wrapper with an inline source, damaged in its header, a section or its package bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "wrapper.json")
        json.dump(base, open(src, "w"))
        good = os.path.join(tmp, "wrapper.amkb")
        subprocess.run([amk, "-q", "convert", src, "-o", good], check=True)
        blob = open(good, "rb").read()
    secs = {}
    for i in range(struct.unpack_from("<I", blob, 28)[0]):
        kind, _flags, off, _size = struct.unpack_from("<IIQQ", blob, HEADER + i * ENTRY)
        secs[{1: "META", 2: "SOURCE", 3: "PACKAGE"}[kind]] = off
    meta_at, source_at, package_at = secs["META"], secs["SOURCE"], secs["PACKAGE"]
    # PACKAGE: queue_offsets at 0, queue_lengths at 256 (i32 [1, 1]); 2 makes queue 1 run past
    # the two instruction records, a size the package lies about.
    cases = [
        ("wrapper_bad_magic_tail", patch(blob, 6, "<B", 0x41, fix=False), "amkb.magic"),
        ("wrapper_header_checksum", patch(blob, 56, "<I", 7, fix=False), "amkb.checksum"),
        ("wrapper_tensor_arg_bytes", patch(blob, 24, "<I", 128), "amkb.header"),
        ("wrapper_truncated", blob[:-3], "amkb.truncated"),
        ("wrapper_package_checksum", patch(blob, package_at + 1, "<B", 0x5A, fix=False), "amkb.checksum"),
        ("wrapper_source_utf8", patch(blob, source_at + 2, "<B", 0xFF), "amkb.source"),
        ("wrapper_meta_syntax", patch(blob, meta_at, "<B", ord("x")), "json.syntax"),
        ("wrapper_queue_lie", patch(blob, package_at + 256 + 4, "<I", 2), "wrapper.package.queue_range"),
    ]
    rows = []
    for name, data, want in cases:
        fname = os.path.join("amkb", name + ".amkb")
        path = os.path.join(here, fname)
        with open(path, "wb") as f:
            f.write(data)
        r = subprocess.run([amk, "--json", "validate", path], capture_output=True, text=True)
        j = json.loads(r.stdout)
        err = j["programs"][0].get("error", {})
        if err.get("code") != want:
            raise SystemExit(f"{fname}: intended {want}, amk says {err.get('code')} at {err.get('where')}: {err.get('message')}")
        rows.append(("validate", fname, r.returncode, want, err["where"]))
    return rows
