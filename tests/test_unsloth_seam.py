"""GAPOTrainer on top of Unsloth's compiled GRPOTrainer, checked on CPU (Unsloth itself needs CUDA: tests/test_gpu.py).

Unsloth 2026.10.7 compiles TRL's GRPOTrainer into `UnslothGRPOTrainer(_UnslothGRPOTrainer)` and puts it in place of
`trl.GRPOTrainer`, so GAPOTrainer derives from it. The stand-in below keeps the two things of that class GAPOTrainer
meets (unsloth/models/rl_replacements.py): `_get_per_token_logps_and_entropies` takes a 7th positional argument
`compute_efficient` and returns (None, None) for it, and `compute_loss` passes it positionally before its own loss.
Everything else is TRL's. gapo/trainer.py is loaded a second time on top of the stand-in; nothing of gapo's is mocked.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import trl

from gapo import backends
from gapo.rewards import group_reward
from gapo.tasks.lists import make_list_selection_dataset

ROOT = Path(__file__).resolve().parents[1]


class _UnslothGRPOTrainer(trl.GRPOTrainer):
    """Unsloth's renamed TRL trainer: the two seams GAPOTrainer meets, recorded."""

    calls: list[tuple] = []

    def _get_per_token_logps_and_entropies(  # Unsloth's signature (rl_replacements.py, 2026.10.7)
        self,
        model,  # noqa: ANN001
        input_ids,  # noqa: ANN001
        attention_mask,  # noqa: ANN001
        logits_to_keep,  # noqa: ANN001
        batch_size=None,  # noqa: ANN001
        compute_entropy=False,  # noqa: ANN001
        compute_efficient=False,  # noqa: ANN001
        *args,  # noqa: ANN002
        **kwargs,  # noqa: ANN003
    ):  # noqa: ANN202
        type(self).calls.append(("logps", compute_efficient, kwargs.get("compute_aux_loss")))
        if compute_efficient:  # Unsloth: no scoring forward here; its loss computes the log-probs itself
            return None, None
        return super()._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=batch_size,
            compute_entropy=compute_entropy,
            **kwargs,
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logits_to_keep = inputs["completion_ids"].size(1)
        # Unsloth's compute_loss: the efficient call, positionally; its loss broadcasts a non-None result
        probe = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, None, False, True
        )[0]
        type(self).calls.append(("probe", probe is None))
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


class UnslothGRPOTrainer(_UnslothGRPOTrainer):
    pass


@pytest.fixture()
def gapo_under_unsloth(monkeypatch):  # noqa: ANN001, ANN201
    """gapo/trainer.py loaded anew while `trl.GRPOTrainer` is the stand-in (as after `import unsloth`)."""
    monkeypatch.setattr(trl, "GRPOTrainer", UnslothGRPOTrainer)
    spec = importlib.util.spec_from_file_location("gapo_trainer_under_unsloth", ROOT / "gapo/trainer.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    UnslothGRPOTrainer.calls = []
    return module


def test_unsloth_compiled_trainer_is_recognised(gapo_under_unsloth):  # noqa: ANN001
    from gapo.trainer import GAPOTrainer

    assert backends.unsloth_compiled(gapo_under_unsloth.GAPOTrainer)
    assert not backends.unsloth_compiled(GAPOTrainer)


def test_backend_unsloth_turns_gapo_speed_paths_off(tiny_gapo_args):  # noqa: ANN001
    args = tiny_gapo_args(backend="unsloth")
    assert args.shared_prompt_forward is False and args.static_cache_generation is False
    with pytest.raises(ValueError, match="backend unsloth runs Unsloth's own generation and log-prob paths"):
        tiny_gapo_args(backend="unsloth", shared_prompt_forward=True)


@pytest.mark.parametrize("name", ["GAPOTrainer", "SharedPromptGAPOTrainer"])
def test_gapo_step_takes_unsloths_paths_except_group_rewards(gapo_under_unsloth, tiny_gapo_args, name):  # noqa: ANN001
    """A real step on tiny-random: Unsloth's efficient call gets (None, None) as Unsloth expects (it got a detached
    forward over another window before: the broadcast failure), group rewards see whole groups, the LoRA moves. With
    the CPU speed-up mixed in too: it turns itself off and passes Unsloth's extra positional argument on."""
    from gapo.backends import lora_config
    from gapo.models import load_model_and_tokenizer

    sizes: list[int] = []

    @group_reward
    def rank_by_length(prompts, completions, **kwargs):  # noqa: ANN001, ANN003, ANN202
        sizes.append(len(completions))
        order = sorted(range(len(completions)), key=lambda i: (len(str(completions[i])), i))
        return [order.index(i) / (len(order) - 1) for i in range(len(order))]

    # shared_prompt_forward=True: even a config that asks for gapo's own log-prob pass gets Unsloth's under Unsloth
    args = tiny_gapo_args(max_steps=1, shared_prompt_forward=True)
    model, tokenizer = load_model_and_tokenizer("tiny-random", device="cpu")
    trainer = getattr(gapo_under_unsloth, name)(
        model=model,
        reward_funcs=[rank_by_length],
        args=args,
        train_dataset=make_list_selection_dataset(8, seed=0),
        processing_class=tokenizer,
        peft_config=lora_config(args),
    )
    assert trainer.args.shared_prompt_forward is (name == "GAPOTrainer")  # only the mixin reads (and clears) it
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    calls = UnslothGRPOTrainer.calls
    assert ("probe", True) in calls and ("probe", False) not in calls
    assert ("logps", True, None) in calls  # compute_efficient reached Unsloth's method, as Unsloth passed it
    assert all(call[2] is not True for call in calls if call[0] == "logps")  # never bound to compute_aux_loss
    assert sizes and set(sizes) == {4}
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)
