"""BERT-base masked-LM training with variable sequence lengths: a workload whose peak reserved
memory under PyTorch's default allocator settings is well above its peak allocated memory
(fragmentation of the caching allocator's segments), for tests/gpu/frag_check.py.

fp32, AdamW, batch 24, lengths drawn from 32..512 (seed 0); the model is built from BertConfig()
(no download). Deterministic: the same lengths, weights and data in every run. Prints one line
per step, then
  RESULT {"ok": true, "steps": N, "peak_allocated": ..., "peak_reserved": ..., "losses": [...]}
or, when an OutOfMemoryError ends the run,
  RESULT {"ok": false, "step": k, "error": "<first line>", ...}
and exits with 3.
"""
import argparse
import json
import random
import sys

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=24)
    args = ap.parse_args()
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    rng = random.Random(0)
    cfg = BertConfig()
    model = BertForMaskedLM(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses = []
    step = 0
    try:
        for step in range(args.steps):
            length = rng.randint(32, 512)
            ids = torch.randint(0, cfg.vocab_size, (args.batch, length), device="cuda")
            out = model(input_ids=ids, labels=ids)
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(out.loss.item()).hex())
            print(f"step {step} length {length} allocated {torch.cuda.memory_allocated()} "
                  f"reserved {torch.cuda.memory_reserved()}", flush=True)
    except torch.OutOfMemoryError as e:
        print("RESULT " + json.dumps({"ok": False, "step": step, "error": str(e).splitlines()[0],
                                      "peak_allocated": torch.cuda.max_memory_allocated(),
                                      "peak_reserved": torch.cuda.max_memory_reserved()}), flush=True)
        sys.exit(3)
    print("RESULT " + json.dumps({"ok": True, "steps": args.steps, "losses": losses,
                                  "peak_allocated": torch.cuda.max_memory_allocated(),
                                  "peak_reserved": torch.cuda.max_memory_reserved()}), flush=True)


if __name__ == "__main__":
    main()
