#!/usr/bin/python3
"""Writes tests/fixtures/safetensors/torch_fixture.safetensors from PyTorch tensors with known values,
or (--verify FILE) reads a safetensors file written by mvgpt and prints its tensors via PyTorch.

Run with Debian's python3-torch: /usr/bin/python3 scripts/make_safetensors_fixture.py
The `safetensors` package is not required: the format is written by hand from its specification,
the way the reference library lays it out (tensors sorted by decreasing element size, then name;
compact JSON header with "__metadata__" first, padded with spaces to a multiple of 8 bytes).
The C++ test (tests/nn/safetensors_test.cpp) checks the values below; keep them in sync.
"""
import argparse
import json
import os
import struct
import sys

import torch

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.int32: "I32",
          torch.int64: "I64", torch.bool: "BOOL"}
FROM_NAME = {v: k for k, v in DTYPES.items()}
# Same-width integer views used to get at the raw bytes (numpy has no bfloat16).
RAW_VIEW = {torch.bfloat16: torch.int16}


def fixture_tensors():
    return {
        # 0.1 and 1/3 are not exact in any of these types: the test checks the rounding matches.
        "weight_f32": torch.tensor([[1.0, -2.5, 0.1], [1 / 3, 1e-7, -0.0]], dtype=torch.float32),
        "values_f64": torch.tensor([0.1, -1 / 3, 12345.678901234567], dtype=torch.float64),
        "half_bf16": torch.tensor([[1.0, 0.1], [-3.140625, 1 / 3]], dtype=torch.bfloat16),
        "ids_i64": torch.tensor([0, -1, 2 ** 40], dtype=torch.int64),
        "scalar_f32": torch.tensor(7.25, dtype=torch.float32),
        "empty_f32": torch.zeros((0, 4), dtype=torch.float32),
        # 3 BF16 elements: 6 bytes, so what follows would be misaligned if the order were not by size.
        "odd_bf16": torch.tensor([0.5, 2.0, -4.0], dtype=torch.bfloat16),
        "mask_bool": torch.tensor([True, False, True], dtype=torch.bool),
    }


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype in RAW_VIEW:
        t = t.view(RAW_VIEW[t.dtype])
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write(path, tensors, metadata=None):
    order = sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in order:
        b = raw_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        dtype = FROM_NAME[info["dtype"]]
        begin, end = info["data_offsets"]
        raw = bytearray(body[begin:end])
        view = RAW_VIEW.get(dtype, dtype)
        t = torch.frombuffer(raw, dtype=view) if end > begin else torch.empty(0, dtype=view)
        out[name] = t.view(dtype).reshape(info["shape"])
    return out, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "safetensors",
                                                  "torch_fixture.safetensors"))
    ap.add_argument("--verify", metavar="FILE", help="print the tensors of FILE instead of writing the fixture")
    args = ap.parse_args()
    if args.verify:
        tensors, meta = read(args.verify)
        print("metadata:", meta)
        for name, t in tensors.items():
            print(name, t.dtype, list(t.shape), t.flatten().tolist())
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write(os.path.abspath(args.out), fixture_tensors(), {"producer": "make_safetensors_fixture.py", "format": "pt"})
    # Round-trip through our own reader as a self-check.
    back, _ = read(os.path.abspath(args.out))
    for name, t in fixture_tensors().items():
        assert torch.equal(back[name], t), name
    print("wrote", os.path.abspath(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
