#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets into tests/fuzz/corpus/<target>/.

Seeds are small valid inputs that reach each part of a decoder: every DEFLATE block
type, every gzip header field, several members, both label widths, and the case
strings' syntax. Files named regress-* beside them are inputs that once broke something;
they are kept by hand, not written here. Output is deterministic (gzip mtime 0), so
rerunning this leaves the tree unchanged.
"""
import gzip
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def member(data, level=9, flags=0, extra=b"", name=b"", comment=b""):
    """One gzip member; deflate from zlib at `level` (0: stored blocks)."""
    head = bytearray(b"\x1f\x8b\x08" + bytes([flags]) + b"\0\0\0\0\0\x03")
    if flags & 4:
        head += struct.pack("<H", len(extra)) + extra
    if flags & 8:
        head += name + b"\0"
    if flags & 16:
        head += comment + b"\0"
    if flags & 2:
        head += struct.pack("<H", zlib.crc32(bytes(head)) & 0xFFFF)
    c = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = c.compress(data) + c.flush()
    return bytes(head) + body + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def idx_images(n, h, w):
    px = bytes((i * 7 + i // w * 3) % 251 for i in range(n * h * w))
    return struct.pack(">IIII", 0x803, n, h, w) + px


def idx_labels(n, wide=False):
    if wide:
        return struct.pack(">II", 0xC01, n) + b"".join(struct.pack(">i", i % 10) for i in range(n))
    return struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n))


def idx_input(images, labels):
    return struct.pack("<H", len(images)) + images + labels


text = b"gradus reads gzip-compressed IDX files; " * 8
write("gunzip", "fixed.gz", gzip.compress(b"hello, deflate", 9, mtime=0))
write("gunzip", "dynamic.gz", gzip.compress(text + bytes(range(256)), 9, mtime=0))
write("gunzip", "stored.gz", member(bytes(range(200)), level=0))
write("gunzip", "headers.gz", member(text, flags=2 | 4 | 8 | 16, extra=b"AB\x02\0xy", name=b"a.idx", comment=b"c"))
write("gunzip", "members.gz", member(b"first ") + member(b"", level=0) + member(text, level=1))
write("gunzip", "empty.gz", gzip.compress(b"", 9, mtime=0))

img, lab = idx_images(3, 4, 5), idx_labels(3)
write("idx", "plain", idx_input(img, lab))
write("idx", "gzip", idx_input(gzip.compress(img, 9, mtime=0), gzip.compress(lab, 9, mtime=0)))
write("idx", "stored-i32", idx_input(member(img, level=0), idx_labels(3, wide=True)))
write("idx", "members", idx_input(member(img[:10]) + member(img[10:]), lab))

specs = [
    "f[2,3] f[2,3]",
    "f[4,1,3] f[5,1]",
    "n[2,8] | axis=-1",
    "!i32[2,3]<-50:50 i32[3]<-50:50",
    "!u8[7]<256 | dtype=f64",
    "bool[2,3] f[] f[]",
    "f[1,2,3,3] f[1,2,5,5] | kernel=3 stride=2 padding=1",
    "f[1,2,3,4] | kernel=3 stride=2 padding=1 input_shape=[1,2,5,5]",
    "p[] p[3,4]",
    "!f[6] | lo=0.5 hi=-0.5",
    "f[1,2,1,6] | interleaved=1 pos_offset=5 theta=500",
    "f[2,3] | shape=[] eps=1e-5",
]
for i, s in enumerate(specs):
    write("cases", "%02d" % i, bytes([i % 4]) + s.encode())
