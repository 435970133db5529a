"""PyTorch's autograd overhead on the chain of bench/bench_autograd.cpp: 1000 adds of a (4) tensor.

Run with Debian's torch: /usr/bin/python3 bench/torch_autograd_overhead.py
Prints microseconds per op (median of repeats) for the raw chain, recording, backward, and the mul
chain recorded and run backward, on one thread.
"""
import statistics
import time

import torch

CHAIN = 1000
REPEATS = 50


def timed(fn, setup=None):
    times = []
    for _ in range(REPEATS):
        state = setup() if setup else None
        t0 = time.perf_counter()
        fn(state)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / CHAIN * 1e6


def main():
    torch.set_num_threads(1)
    x = torch.randn(4, requires_grad=True)
    xd = x.detach()

    def raw(_):
        with torch.no_grad():
            y = xd
            for _ in range(CHAIN):
                y = y + xd

    def record(_):
        y = x
        for _ in range(CHAIN):
            y = y + x
        return y

    def build():
        x.grad = None
        return record(None)

    def backward(y):
        y.backward(torch.ones(4))

    xm = torch.ones(4, requires_grad=True)

    def mul_chain(_):
        y = xm
        for _ in range(CHAIN):
            y = y * xm
        y.backward(torch.ones(4))
        xm.grad = None

    for name, fn, setup in [("raw add", raw, None), ("record add", record, None),
                            ("backward add", backward, build), ("record+backward mul", mul_chain, None)]:
        timed(fn, setup)  # warm up
        print(f"torch {torch.__version__} {name:>20}: {timed(fn, setup):.3f} us/op")


if __name__ == "__main__":
    main()
