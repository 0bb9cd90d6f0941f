"""Transformer encoder training with random sequence lengths (docs/h200.md: 8 layers,
d=1024, sequence length 64..2048), for step `cap` of scripts/gpu-check.sh (tests/gpu/cap_check.sh).

Deterministic: seed 0 for the lengths, the weights and the data; the last step is forced to the
longest length (2048) so that every run reaches the same peak (about 20 GB at batch 16 on the
H200 with PyTorch's allocator). Prints one line per step, then either
  RESULT {"ok": true, ...}
or, when an exception ends the run,
  OOM_TYPE <module.Class>
  OOM_MESSAGE <first line of str(exception)>
  RESULT {"ok": false, "mem_get_info": [free, total], ...}
and exits with 3 (any other failure: exit 1).
"""
import argparse
import json
import random
import sys

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=1024)
    args = ap.parse_args()

    rng = random.Random(0)
    lengths = [rng.randint(64, 2048) for _ in range(args.steps)]
    lengths[-1] = 2048
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layer = torch.nn.TransformerEncoderLayer(args.d_model, nhead=16, dim_feedforward=4 * args.d_model,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=args.layers, enable_nested_tensor=False).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    print("lengths", lengths, flush=True)
    done = 0
    try:
        for step, n in enumerate(lengths):
            x = torch.randn(args.batch, n, args.d_model, device=dev)
            loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            done += 1
            print(f"step {step} len {n} loss {loss.item():.6f}", flush=True)
    except Exception as e:  # noqa: BLE001 -- we report whatever PyTorch raises
        t = type(e)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"OOM_TYPE {t.__module__}.{t.__qualname__}", flush=True)
        print(f"OOM_MESSAGE {msg}", flush=True)
        try:
            free, total = torch.cuda.mem_get_info()
        except Exception:  # noqa: BLE001
            free, total = -1, -1
        print("RESULT " + json.dumps({"ok": False, "steps_done": done, "lengths": lengths,
                                      "is_torch_oom": isinstance(e, torch.OutOfMemoryError),
                                      "mem_get_info": [free, total]}), flush=True)
        sys.exit(3)
    print("RESULT " + json.dumps({"ok": True, "steps_done": done, "lengths": lengths,
                                  "max_memory_allocated": torch.cuda.max_memory_allocated(),
                                  "peak_allocated": torch.cuda.max_memory_allocated(),
                                  "peak_reserved": torch.cuda.max_memory_reserved(),
                                  "mem_get_info": list(torch.cuda.mem_get_info())}), flush=True)


if __name__ == "__main__":
    main()
