"""The GPT-2 124M training step that the tensor-level GPU checks time: torch_level_check.py (the
recorded run against the same run without vramtrace) and history_cost.py (each recording setting
of PyTorch's history). One definition, so that their step times measure the same work.

GPT2Config() (no download), bf16 autocast, batch 8 x 1024, AdamW(lr=1e-4); the model's weights
from torch.manual_seed(0), the batches from a CUDA generator seeded 1. Importing this module
imports torch and transformers and initialises nothing.
"""
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def gpt2_trainer():
    """Builds the model and optimiser on the current CUDA device; returns step(), which runs one
    training step on a fresh random batch and returns its time in ms (from a synchronisation
    after the batch is made to one after the loss is read)."""
    torch.manual_seed(0)
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (8, 1024), device="cuda", generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.loss.item()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    return step
