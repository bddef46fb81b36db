"""Run by tests/test_distributed.py under `torchrun --nproc_per_node 2` (gloo, CPU): records what reward functions see.

Global generation batch = 2 processes x 2 rows = one group of G=4, so stock TRL hands each process half a group.
Each rank writes OUT/rank{R}.json with: the local slice sizes the per-completion (TRL-style) reward saw, the group
sizes and prompts the group reward saw (main process only: it computes and broadcasts), and per step the global
reward column of the group reward plus the gathered answers and items, to recompute the rewards on whole groups.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist
from accelerate.utils import gather_object

from gapo.data import make_list_selection_dataset
from gapo.models import load_model_and_tokenizer
from gapo.rewards import completion_text, extract_answer, frequency_reward
from gapo.trainer import GAPOConfig, GAPOTrainer, lora_config

out_dir = Path(sys.argv[1])
record: dict = {"per_completion_sizes": [], "group_calls": [], "steps": []}


def per_completion_spy(prompts, completions, **kwargs):  # noqa: ANN001, ANN201
    record["per_completion_sizes"].append(len(completions))
    return [0.0] * len(completions)


class RecordingFrequency:
    """The paper's reward, recording each call (a callable object: it pickles and keeps its __name__)."""

    __name__ = "frequency"
    _gapo_group_reward = True

    def __call__(self, prompts, completions, **kwargs):  # noqa: ANN001, ANN204
        record["group_calls"].append({"size": len(completions), "distinct_prompts": len({str(p) for p in prompts})})
        return frequency_reward(prompts=prompts, completions=completions, **kwargs)


class Spy(GAPOTrainer):
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        answers = gather_object([extract_answer(completion_text(p, c)) for p, c in zip(prompts, completions)])
        items = gather_object([x["items"] for x in inputs])
        record["steps"].append(
            {"local_rows": len(prompts), "rewards": rewards[:, 0].tolist(), "answers": answers, "items": items}
        )
        return rewards


model, tokenizer = load_model_and_tokenizer("tiny-random", device="cpu")
args = GAPOConfig(
    output_dir=str(out_dir / "run"),
    num_generations=4,
    per_device_train_batch_size=2,
    max_steps=2,
    max_completion_length=6,
    learning_rate=1e-3,
    lora_r=4,
    lora_alpha=8,
    save_strategy="no",
    logging_steps=1,
    shared_prompt_forward=True,
    seed=0,
)
trainer = Spy(
    model=model,
    reward_funcs=[RecordingFrequency(), per_completion_spy],
    args=args,
    train_dataset=make_list_selection_dataset(8, seed=0, response_prefix="<answer>"),
    processing_class=tokenizer,
    peft_config=lora_config(args),
)
trainer.train()
rank = dist.get_rank() if dist.is_initialized() else 0
record["world_size"] = dist.get_world_size() if dist.is_initialized() else 1
(out_dir / f"rank{rank}.json").write_text(json.dumps(record))
