"""One GAPO run on a GPU through one backend, in a process of its own (Unsloth must be imported before trl).

    python tests/gpu/train_backend.py BACKEND MODEL OUTPUT_DIR [STEPS]

Trains `STEPS` steps with a group reward that ranks the completions of a group (it is spread on any model, random
weights included, so the LoRA must move), and records the size of every group the reward was called with.
Prints one JSON line: the backend that ran, the group sizes seen, whether every LoRA
weight tensor changed, the step losses and rewards, and the generation settings used.
"""

from __future__ import annotations

import json
import logging
import sys

from gapo import backends

backend_name, model_name, output_dir = sys.argv[1:4]
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
backends.activate(backends.resolve(backend_name))

import torch  # noqa: E402

from gapo.rewards import group_reward  # noqa: E402
from gapo.tasks.lists import make_list_selection_dataset  # noqa: E402
from gapo.trainer import GAPOConfig, GAPOTrainer  # noqa: E402

G = 8
group_sizes: list[int] = []


@group_reward
def token_sum_rank(prompts, completions, completion_ids, **kwargs):  # noqa: ANN001, ANN201
    """Each completion's rank, within its group, by the sum of its token ids: always spread, on any model."""
    group_sizes.append(len(completions))
    order = sorted(range(len(completion_ids)), key=lambda i: (sum(completion_ids[i]), i))
    ranks = {row: rank for rank, row in enumerate(order)}
    return [ranks[i] / (len(order) - 1) for i in range(len(order))]


args = GAPOConfig(
    output_dir=output_dir,
    backend=backend_name,
    num_generations=G,
    per_device_train_batch_size=2 * G,
    max_steps=steps,
    max_completion_length=8,
    learning_rate=5e-3,
    lora_r=8,
    lora_alpha=16,
    lora_dropout=0.0,
    logging_steps=1,
    save_strategy="no",
    report_to="none",
    seed=0,
)
model, tokenizer, peft_config = backends.load_policy(model_name, args)
trainer = GAPOTrainer(
    model=model,
    reward_funcs=[token_sum_rank],
    args=args,
    train_dataset=make_list_selection_dataset(8 * steps, seed=0),
    processing_class=tokenizer,
    peft_config=peft_config,
)
before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
trainer.train()
after = dict(trainer.model.named_parameters())
changed = [not torch.equal(before[n], after[n].detach()) for n in before]
logs = [row for row in trainer.state.log_history if "loss" in row]
print(
    json.dumps(
        {
            "backend": args.backend,
            "model_class": type(trainer.model).__name__,
            "group_sizes": sorted(set(group_sizes)),
            "groups_scored": len(group_sizes),
            "lora_tensors": len(before),
            "lora_tensors_changed": sum(changed),
            "losses": [row["loss"] for row in logs],
            "rewards": [row.get("reward") for row in logs],
            "static_cache_generation": args.static_cache_generation,
            "shared_prompt_forward": args.shared_prompt_forward,
            "cache_implementation": trainer.generation_config.cache_implementation,
            "gradient_checkpointing": args.gradient_checkpointing,
            "bf16": args.bf16,
        }
    )
)
