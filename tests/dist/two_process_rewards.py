"""Run by tests/test_distributed.py on 2 CPU processes (gloo): records what reward functions see.

    python tests/dist/two_process_rewards.py OUT [--no-shared-prompt] [--route-cpu-to-fsdp]

launched by `torchrun --nproc_per_node 2` or by `accelerate launch --config_file configs/accelerate/X.yaml`.

Global generation batch = 2 processes x 2 rows = one group of G=4, so stock TRL hands each process half a group.
Each rank writes OUT/rank{R}.json with: the local slice sizes the per-completion (TRL-style) reward saw, the group
sizes and prompts the group reward saw (main process only: it computes and broadcasts), per step the global reward
columns of the two group rewards plus the gathered answers, items and completion texts (to recompute the rewards on
whole groups), and how accelerate distributed the model (distributed type, wrapper, placement of a LoRA weight).

--route-cpu-to-fsdp: make accelerate's CPU processes take its FSDP path (tests/dist/cpu_fsdp.py says why).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch.distributed as dist
from accelerate.utils import gather_object
from cpu_fsdp import route_cpu_to_fsdp

from gapo.backends import lora_config
from gapo.tasks.lists import make_list_selection_dataset
from gapo.models import load_model_and_tokenizer
from gapo.rewards import GroupReward, completion_text, extract_answer, frequency_reward
from gapo.trainer import GAPOConfig, GAPOTrainer, SharedPromptGAPOTrainer

parser = argparse.ArgumentParser()
parser.add_argument("out_dir", type=Path)
parser.add_argument("--no-shared-prompt", action="store_true", help="GAPOConfig's CUDA default (the CPU one is on)")
parser.add_argument("--route-cpu-to-fsdp", action="store_true")
cli = parser.parse_args()
if cli.route_cpu_to_fsdp:
    route_cpu_to_fsdp()

record: dict = {"per_completion_sizes": [], "group_calls": [], "steps": []}


def per_completion_spy(prompts, completions, **kwargs):  # noqa: ANN001, ANN201
    record["per_completion_sizes"].append(len(completions))
    return [0.0] * len(completions)


class RecordingFrequency(GroupReward):
    """The paper's reward, recording each call (a GroupReward: it pickles and keeps its name)."""

    name = "frequency"

    def __call__(self, prompts, completions, **kwargs):  # noqa: ANN001, ANN204
        record["group_calls"].append({"size": len(completions), "distinct_prompts": len({str(p) for p in prompts})})
        return frequency_reward(prompts=prompts, completions=completions, **kwargs)


def rank_in_group(texts: list[str]) -> list[float]:
    """Each text's rank in its group: (number of texts in the group sorting before it) / (G - 1).

    Why: a random tiny model never answers validly, so the frequency reward is -1 for any grouping. This one changes
    with every row of the group and with the row order, so a half group or a misplaced row gives other numbers.
    """
    return [sum(other < text for other in texts) / (len(texts) - 1) for text in texts]


class RankInGroup(GroupReward):
    name = "rank_in_group"

    def __call__(self, prompts, completions, **kwargs):  # noqa: ANN001, ANN204
        return rank_in_group([completion_text(p, c) for p, c in zip(prompts, completions, strict=True)])


class Spy(GAPOTrainer if cli.no_shared_prompt else SharedPromptGAPOTrainer):  # as `gapo train` picks
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001, ANN202
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # (B_global, 3)
        texts = [completion_text(p, c) for p, c in zip(prompts, completions, strict=True)]
        record["steps"].append(
            {
                "local_rows": len(prompts),
                "rewards": rewards[:, 0].tolist(),
                "rank_rewards": rewards[:, 1].tolist(),
                "texts": gather_object(texts),
                "answers": gather_object([extract_answer(t) for t in texts]),
                "items": gather_object([x["items"] for x in inputs]),
            }
        )
        return rewards


def lora_placements(model: Any) -> list[str] | None:
    """How one LoRA weight is laid out: DTensor placements under FSDP2 (e.g. ['Shard(dim=0)']), None if whole."""
    weight = next(p for name, p in model.named_parameters() if "lora_A" in name)
    placements = getattr(weight, "placements", None)
    return [repr(p) for p in placements] if placements is not None else None


model, tokenizer = load_model_and_tokenizer("tiny-random", device="cpu")
args = GAPOConfig(
    output_dir=str(cli.out_dir / "run"),
    num_generations=4,
    per_device_train_batch_size=2,
    max_steps=2,
    max_completion_length=6,
    learning_rate=1e-3,
    lora_r=4,
    lora_alpha=8,
    save_strategy="no",
    logging_steps=1,
    shared_prompt_forward=not cli.no_shared_prompt,
    seed=0,
)
trainer = Spy(
    model=model,
    reward_funcs=[RecordingFrequency(), RankInGroup(), per_completion_spy],
    args=args,
    train_dataset=make_list_selection_dataset(8, seed=0),
    processing_class=tokenizer,
    peft_config=lora_config(args),
)
trainer.train()
rank = dist.get_rank() if dist.is_initialized() else 0
record["world_size"] = dist.get_world_size() if dist.is_initialized() else 1
record["distributed_type"] = trainer.accelerator.distributed_type.value
record["wrapper"] = type(trainer.model_wrapped).__name__
record["lora_placements"] = lora_placements(trainer.model_wrapped)
(cli.out_dir / f"rank{rank}.json").write_text(json.dumps(record))
