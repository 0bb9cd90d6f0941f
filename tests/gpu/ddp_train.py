"""A small DDP training for step `multi` of scripts/gpu-check.sh (tests/gpu/multi_check.sh): one
process per GPU, started by torchrun (`python3 -m torch.distributed.run --standalone
--nproc_per_node 2 ddp_train.py`).

Each rank selects its own GPU from LOCAL_RANK before any other CUDA call, builds a small
transformer encoder, wraps it in DistributedDataParallel (NCCL) and trains a few steps on random
data. With --bug, rank 1 also creates tensors on cuda:0 (a classic mistake: a tensor made with
device="cuda:0", or torch.load without map_location), which vramtrace must flag.

Prints one line `RESULT {json}` per rank: rank, device, steps, the last loss, PyTorch's peaks.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--bug", action="store_true", help="rank 1 also allocates on cuda:0")
    ap.add_argument("--bug-mib", type=int, default=256)
    args = ap.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)  # before anything else touches CUDA
    dev = torch.device("cuda", local_rank)
    try:
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:  # torch < 2.3 has no device_id
        dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.manual_seed(0)

    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=4), nn.Linear(256, 256)).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)

    stray = []
    if args.bug and rank == 1:
        # The deliberate bug: memory on another rank's GPU.
        n = args.bug_mib * (1 << 20) // 4
        stray.append(torch.ones(n, device="cuda:0"))
        stray.append(torch.zeros(n // 4, device="cuda:0"))

    loss = None
    for _ in range(args.steps):
        x = torch.randn(16, 128, 256, device=dev)
        y = torch.randn(16, 128, 256, device=dev)
        out = ddp(x)
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize(dev)
    dist.barrier()
    print("RESULT " + json.dumps({
        "rank": rank, "local_rank": local_rank, "device": local_rank, "steps": args.steps,
        "loss": float(loss.item()), "stray_tensors_on_cuda0": len(stray),
        "max_memory_allocated": torch.cuda.max_memory_allocated(dev),
        "max_memory_reserved": torch.cuda.max_memory_reserved(dev),
    }), flush=True)
    del stray
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
