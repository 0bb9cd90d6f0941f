"""GPU check of reuse safety for PyTorch (tests/gpu/reuse_check.sh): a correct program that reads a
tensor on a side stream, calls `tensor.record_stream(side)` and frees it on the main stream, then
allocates the same size at once and overwrites it (the pattern of DDP, FSDP and pipelined loaders).
PyTorch's own allocator waits for the side stream before reusing the block; a cache below PyTorch
with PyTorch's cache off (PYTORCH_NO_CUDA_MEMORY_CACHING=1) sees only cudaMalloc and cudaFree.

Usage: python3 record_stream_check.py [TRIALS]   prints "record_stream wrong N of T"
"""
import sys

import torch


def main():
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    n = 1 << 22
    side = torch.cuda.Stream()
    wrong = 0
    for _ in range(trials):
        x = torch.ones(n, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # ~25 ms before the read
            total = x.sum()
        x.record_stream(side)
        del x
        y = torch.full((n,), 2.0, device="cuda")
        torch.cuda.synchronize()
        if total.item() != n:
            wrong += 1
        del y, total
    print(f"record_stream wrong {wrong} of {trials}")


if __name__ == "__main__":
    main()
