"""Training steps for the shim's GPU checks (scripts/gpu-check.sh: steps compat, bench, trace).

Prints one line `RESULT {json}` with the loss of every step (float.hex, for bit-identical
comparison with and without the shim), step times, and PyTorch's own allocator statistics.
Models are built from configs (no download): gpt2-small (4 layers, eager attention, deterministic
algorithms: the correctness rows), gpt2 (124M, batch 8 x 1024, bf16 autocast, AdamW: as in
docs/h200.md), llama (1.1B, seq 2048, batch 4, gradient checkpointing), bert (BERT-base masked
LM, batch 16, a sequence length drawn from 64..512 for every step with seed 0: variable shapes, so
the allocator sees new sizes from step to step; bert-fixed: the same model at 288 tokens every step). `--side-stream` adds what DDP does to a step: as
backward accumulates each bucket of gradients (25 MB, DDP's default bucket), work on those
gradients is queued on a side stream (a stand-in for the all-reduce on NCCL's stream), which the
main stream waits for before the optimizer step; the losses stay those of the plain run.
"""
import argparse
import json
import os
import random
import statistics
import time

import torch


def eager(cfg):
    """Plain attention (deterministic backward), across transformers versions."""
    for attr in ("_attn_implementation", "attn_implementation"):
        try:
            setattr(cfg, attr, "eager")
            return
        except Exception:  # noqa: BLE001 - the attribute is read-only in some versions
            pass


def build(name):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    if name in ("bert", "bert-fixed"):
        from transformers import BertConfig, BertForMaskedLM

        cfg = BertConfig()  # base: 12 layers, 768 hidden
        # bert-fixed: every step at 288 tokens, the mean of bert's lengths (a control without new shapes).
        return BertForMaskedLM(cfg), 16, 288 if name == "bert-fixed" else None, cfg.vocab_size

    if name == "gpt2-small":
        cfg = GPT2Config(n_layer=4, n_head=8, n_embd=512, n_positions=512, vocab_size=8192)
        eager(cfg)
        return GPT2LMHeadModel(cfg), 4, 256, cfg.vocab_size
    if name == "gpt2":
        cfg = GPT2Config()  # 124M
        return GPT2LMHeadModel(cfg), 8, 1024, cfg.vocab_size
    if name == "llama":
        cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                          num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                          max_position_embeddings=2048)
        cfg.use_cache = False
        m = LlamaForCausalLM(cfg)
        m.gradient_checkpointing_enable()
        return m, 4, 2048, cfg.vocab_size
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--side-stream", action="store_true", help="DDP-like bucketed gradient work on a side stream")
    args = ap.parse_args()

    deterministic = args.model == "gpt2-small"
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    model, batch, seq, vocab = build(args.model)
    model = model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=False, foreach=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    side = torch.cuda.Stream() if args.side_stream else None
    bucket, bucket_bytes = [], [0]

    def flush_bucket():
        # The stand-in for DDP's all-reduce of a bucket: multiply by one on the side stream.
        if bucket:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch._foreach_mul_(bucket, 1.0)
            bucket.clear()
            bucket_bytes[0] = 0

    def on_grad(p):
        bucket.append(p.grad)
        bucket_bytes[0] += p.grad.numel() * p.grad.element_size()
        if bucket_bytes[0] >= 25 << 20:
            flush_bucket()

    if side is not None:
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(on_grad)
    lengths = random.Random(0)
    losses, times = [], []
    for step in range(args.warmup + args.steps):
        n = seq if seq is not None else lengths.randint(64, 512)
        ids = torch.randint(0, vocab, (batch, n), device="cuda", generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not deterministic):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        if side is not None:
            flush_bucket()
            torch.cuda.current_stream().wait_stream(side)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = out.loss.detach().float().item()  # synchronises
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(loss).hex())
    stats = torch.cuda.memory_stats()
    print("RESULT " + json.dumps({
        "model": args.model,
        "side_stream": args.side_stream,
        "losses": losses,
        "step_ms_median": statistics.median(times) if times else None,
        "step_ms": times,
        "peak_reserved": torch.cuda.max_memory_reserved(),
        "peak_allocated": torch.cuda.max_memory_allocated(),
        "num_device_alloc": stats.get("num_device_alloc"),
        "num_device_free": stats.get("num_device_free"),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", ""),
    }), flush=True)


if __name__ == "__main__":
    main()
