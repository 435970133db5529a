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
import os
import sys

import torch

from hand_safetensors import read_safetensors, write_safetensors

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


def write(path, tensors, metadata=None):
    """In the reference library's order: by decreasing element size, then name."""
    write_safetensors(path, sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0])), metadata)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "safetensors",
                                                  "torch_fixture.safetensors"))
    ap.add_argument("--verify", metavar="FILE", help="print the tensors of FILE instead of writing the fixture")
    args = ap.parse_args()
    if args.verify:
        tensors, meta = read_safetensors(args.verify)
        print("metadata:", meta)
        for name, t in tensors.items():
            print(name, t.dtype, list(t.shape), t.flatten().tolist())
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write(os.path.abspath(args.out), fixture_tensors(), {"producer": "make_safetensors_fixture.py", "format": "pt"})
    # Round-trip through our own reader as a self-check.
    back, _ = read_safetensors(os.path.abspath(args.out))
    for name, t in fixture_tensors().items():
        assert torch.equal(back[name], t), name
    print("wrote", os.path.abspath(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
