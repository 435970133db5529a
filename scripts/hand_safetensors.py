"""safetensors read and written by hand (struct + json), for the scripts that use PyTorch but not
the safetensors package: little-endian data, the JSON header padded with spaces to 8 bytes."""
import json
import math
import os
import struct

import torch

DTYPE_NAMES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.int32: "I32",
               torch.int64: "I64", torch.bool: "BOOL"}
FROM_NAME = {v: k for k, v in DTYPE_NAMES.items()}
# Same-width integer views used to get at the raw bytes (numpy has no bfloat16).
RAW_VIEW = {torch.bfloat16: torch.int16}


def raw_bytes(t):
    t = t.contiguous()
    if t.dtype in RAW_VIEW:
        t = t.view(RAW_VIEW[t.dtype])
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, tensor), written in that order, little-endian, header padded to 8."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors:
        b = raw_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def read_safetensors(path):
    """Returns ({name: tensor}, metadata), checking that the offsets tile the data section."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    body = data[8 + n:]
    out, spans = {}, []
    for name, info in header.items():
        dtype = FROM_NAME[info["dtype"]]
        begin, end = info["data_offsets"]
        count = math.prod(info["shape"])
        if end - begin != count * torch.tensor([], dtype=dtype).element_size():
            raise ValueError(f"{path}: {name}: {end - begin} bytes for shape {info['shape']}")
        view = RAW_VIEW.get(dtype, dtype)
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=view) if count else torch.empty(0, dtype=view)
        out[name] = t.view(dtype).reshape(info["shape"])
        spans.append((begin, end))
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise ValueError(f"{path}: gap or overlap at byte {b}")
        pos = e
    if pos != len(body):
        raise ValueError(f"{path}: data section is {len(body)} bytes, tensors cover {pos}")
    return out, metadata
