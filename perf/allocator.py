"""What `gapo.models.keep_freed_memory` (glibc's `mallopt`: no `mmap` for large blocks, no trimming) saves on CPU.

Workload: the two halves of a GAPO step on one fixed batch, G rows of the planets prompt: the rollouts (`encode_prompts`
+ `decode_rows`, a fixed generator, so every repeat decodes the same tokens) and the log-prob pass with its backward
(`shared_prompt_logps` on those rows, with the embedded recipe's LoRA from params.yaml `train`). Each allocator
runs in a fresh process (the setting is process-wide and cannot be undone), one warm-up repeat, then `--repeats`
timed ones. Prints one line per allocator (median seconds of each half, minor page faults and kernel CPU seconds per
repeat, peak RSS) and ends with ``speedup=X.XX`` (median step time, default over kept). One pair is within the
run-to-run spread of a step here: alternate several (docs/performance.md). CPU, about 75 s a pair::

    .venv/bin/python perf/allocator.py --out /tmp/gapo_eval/allocator.json          # one pair
    for i in 1 2 3; do for m in default kept; do .venv/bin/python perf/allocator.py --mode $m; done; done
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import yaml

MODES = ("default", "kept")


def run_mode(mode: str, model: str, g: int, repeats: int, max_new_tokens: int) -> dict:
    """One allocator's timings, in this process."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gapo.backends import cpu_has_bf16, lora_config
    from gapo.models import keep_freed_memory, resolve_model_path
    from gapo.prefix import Decoding, decode_rows, encode_prompts, shared_prompt_logps
    from gapo.repro.chat import render_prompt
    from gapo.repro.prompts import UNIFORMITY_LISTS, list_prompt, user_message

    if mode == "kept" and not keep_freed_memory():
        raise SystemExit("allocator.py: keep_freed_memory needs glibc")
    path = resolve_model_path(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    dtype = torch.bfloat16 if cpu_has_bf16() else torch.float32  # the embedded recipe's policy_dtype: auto
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)  # not gapo.models: it would set the allocator
    # the embedded recipe's LoRA (params.yaml `train`), through the trainer's own PEFT config
    train = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text(encoding="utf-8"))["train"]
    policy = get_peft_model(policy, lora_config(SimpleNamespace(**train))).train()
    text, _ = render_prompt(tokenizer, user_message(list_prompt(UNIFORMITY_LISTS["planets"])))
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    decoding = Decoding(max_new_tokens=max_new_tokens, eos_token_ids=(tokenizer.eos_token_id,))
    rows = []
    for _ in range(repeats + 1):
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        with torch.no_grad():
            encoded = encode_prompts(policy, [prompt], tokenizer.pad_token_id, torch.device("cpu"))
            completions = decode_rows(policy, encoded, [0] * g, decoding, torch.Generator().manual_seed(0))
        t1 = time.perf_counter()
        width = max(len(c) for c in completions)
        ids = torch.tensor([prompt + c + [tokenizer.pad_token_id] * (width - len(c)) for c in completions])
        mask = torch.tensor([[1] * len(prompt) + [1] * len(c) + [0] * (width - len(c)) for c in completions])
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            logps, _ = shared_prompt_logps(policy, ids, mask, width, compute_entropy=True)
        logps.sum().backward()
        policy.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        rows.append(
            {
                "rollouts_s": t1 - t0,
                "logprob_s": t2 - t1,
                "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before.ru_minflt,
                "kernel_s": resource.getrusage(resource.RUSAGE_SELF).ru_stime - before.ru_stime,
                "tokens": sum(len(c) for c in completions),
            }
        )
    timed = rows[1:]
    return {
        "mode": mode,
        "rollouts_s": statistics.median(r["rollouts_s"] for r in timed),
        "logprob_s": statistics.median(r["logprob_s"] for r in timed),
        "step_s": statistics.median(r["rollouts_s"] + r["logprob_s"] for r in timed),
        "faults": statistics.median(r["faults"] for r in timed),
        "kernel_s": statistics.median(r["kernel_s"] for r in timed),
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "tokens": timed[0]["tokens"],
        "repeats": timed,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--num-generations", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--mode", choices=MODES, help="time one allocator in this process and print its JSON")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.mode:
        result = run_mode(args.mode, args.model, args.num_generations, args.repeats, args.max_new_tokens)
        print(json.dumps(result))
        return
    results = {}
    for mode in MODES:
        flags = ["--model", args.model, "--num-generations", str(args.num_generations)]
        flags += ["--repeats", str(args.repeats), "--max-new-tokens", str(args.max_new_tokens), "--mode", mode]
        out = subprocess.run([sys.executable, __file__, *flags], check=True, capture_output=True, text=True).stdout
        results[mode] = r = json.loads(out.strip().splitlines()[-1])
        print(
            f"{mode:8s} step {r['step_s']:.2f} s (rollouts {r['rollouts_s']:.2f}, log-prob pass {r['logprob_s']:.2f}), "
            f"{r['faults']:,.0f} page faults and {r['kernel_s']:.2f} s kernel time a repeat, peak RSS "
            f"{r['peak_rss_gib']:.2f} GiB, {r['tokens']} completion tokens"
        )
    print(f"speedup={results['default']['step_s'] / results['kept']['step_s']:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
