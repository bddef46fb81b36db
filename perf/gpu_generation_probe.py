"""GPU probe: what one 32-row x 16-token generation and one train forward+backward cost, by path (docs/performance.md).

    python -m perf.gpu_generation_probe 7b   # or 0.5b: random weights, Qwen2.5 shapes, bf16, LoRA r=64 all-linear

Generation: PEFT LoRA in train and eval mode, the base model with the adapter disabled, merge -> generate -> unmerge,
and a static KV cache (transformers then compiles the decode step). Then forward+backward over prompt+completion with
gradient checkpointing off and on, with the peak memory of each. Medians of 5 after 2 warm-ups; one JSON line at
the end. Needs CUDA.
"""

import json
import sys
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

shape = sys.argv[1]  # 7b | 0.5b
cfg = AutoConfig.from_pretrained("gapo/resources/qwen2.5-7b-instruct-config.json")
if shape == "0.5b":
    cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers = 896, 4864, 24
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.tie_word_embeddings = 14, 2, True
torch.manual_seed(0)
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
model.generation_config.eos_token_id = 151645
model.generation_config.pad_token_id = 151643
lora = LoraConfig(r=64, lora_alpha=32, lora_dropout=0.1, target_modules="all-linear", task_type="CAUSAL_LM")
model = get_peft_model(model, lora)
for n, p in model.named_parameters():
    if "lora_B" in n:
        torch.nn.init.normal_(p, std=0.01)
G, P, C = 32, 85, 16
ids = torch.randint(0, 150000, (G, P), device="cuda")
mask = torch.ones_like(ids)
res = {}


def timeit(name, fn, n=5, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    ts.sort()
    res[name] = round(ts[len(ts) // 2], 4)
    print(name, res[name], flush=True)


gen = dict(max_new_tokens=C, min_new_tokens=C, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
model.train()
with torch.no_grad():
    timeit("gen_peft_trainmode", lambda: model.generate(input_ids=ids, attention_mask=mask, **gen))
    model.eval()
    timeit("gen_peft_eval", lambda: model.generate(input_ids=ids, attention_mask=mask, **gen))
    base = model.get_base_model()
    with model.disable_adapter():
        timeit("gen_base_noadapter", lambda: model.generate(input_ids=ids, attention_mask=mask, **gen))

    def merged():
        model.merge_adapter()
        try:
            return model.generate(input_ids=ids, attention_mask=mask, **gen)
        finally:
            model.unmerge_adapter()

    timeit("gen_merge_unmerge", merged)
    try:
        timeit(
            "gen_peft_static_compile",
            lambda: model.generate(input_ids=ids, attention_mask=mask, cache_implementation="static", **gen),
            n=3,
            warm=2,
        )
    except Exception as e:  # noqa: BLE001
        print("static failed", repr(e)[:300])
model.train()
full = torch.cat([ids, torch.randint(0, 150000, (G, C), device="cuda")], 1)


def fwdbwd():
    out = model(input_ids=full, attention_mask=torch.ones_like(full), logits_to_keep=C + 1)
    out.logits.float().logsumexp(-1).mean().backward()


torch.cuda.reset_peak_memory_stats()
timeit("fwdbwd_nockpt", fwdbwd)
res["peak_nockpt_gb"] = torch.cuda.max_memory_allocated() / 2**30
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
torch.cuda.reset_peak_memory_stats()
timeit("fwdbwd_ckpt", fwdbwd)
res["peak_ckpt_gb"] = torch.cuda.max_memory_allocated() / 2**30
print(json.dumps({shape: res}))
