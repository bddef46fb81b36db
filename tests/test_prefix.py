"""gapo.prefix: the shared-prompt forward equals TRL's plain log-prob pass (values, loss, LoRA gradients)."""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

from gapo import prefix
from gapo.repro.offline import TinyRandomSpec, tiny_random_model

TEMPERATURE = 0.7
SPEC = TinyRandomSpec(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, seed=1)
PAD = 151643


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()


def make_policy(tokenizer, attn: str = "sdpa"):  # noqa: ANN001, ANN201
    """tiny-random (3 layers) with a LoRA adapter whose B is non-zero (so every LoRA weight gets a gradient), set
    up the way GRPOTrainer sets up its policy."""
    from peft import LoraConfig, get_peft_model

    model = tiny_random_model(tokenizer, SPEC)
    model.set_attn_implementation(attn)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = get_peft_model(model, config)
    model.train()
    return model


def trl_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy=True, batch_size=None):  # noqa: ANN001, ANN201
    """TRL's own log-prob pass (GRPOTrainer._full_logits_logps, what its public method runs), the reference.

    The entropy keeps its gradient (as with TRL's entropy bonus on), so the entropy term's gradient is compared too.
    """
    from trl import GRPOTrainer

    fake_trainer = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(autocast=contextlib.nullcontext),
        temperature=TEMPERATURE,
        model_kwarg_keys={"logits_to_keep"},
        _entropy_bonus_enabled=True,
    )
    logps, entropies, _ = GRPOTrainer._full_logits_logps(
        fake_trainer, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy=compute_entropy
    )
    return logps, entropies


def mixed_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Prompts A (5 tokens), B (9), C (7), D (9, same length as B) in rows [A B A C B A C D A]: groups interleaved and
    split (any micro-batch slice of a real generation batch looks like this), prompts left-padded, completions of 0 to
    6 tokens right-padded (one fully masked row, as `mask_truncated_completions` makes)."""
    g = torch.Generator().manual_seed(seed)
    prompts = {k: torch.randint(0, 150000, (n,), generator=g) for k, n in [("A", 5), ("B", 9), ("C", 7), ("D", 9)]}
    rows = ["A", "B", "A", "C", "B", "A", "C", "D", "A"]
    completion_lengths = [3, 6, 1, 4, 2, 5, 6, 0, 2]
    p = max(len(t) for t in prompts.values())
    c = max(completion_lengths)
    input_ids = torch.full((len(rows), p + c), PAD)
    mask = torch.zeros((len(rows), p + c), dtype=torch.long)
    for i, (key, n) in enumerate(zip(rows, completion_lengths, strict=True)):
        prompt = prompts[key]
        input_ids[i, p - len(prompt) : p] = prompt
        mask[i, p - len(prompt) : p] = 1
        input_ids[i, p : p + n] = torch.randint(0, 150000, (n,), generator=g)
        mask[i, p : p + n] = 1
    return input_ids, mask, c


def grpo_loss(logps: torch.Tensor, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GRPO-like loss: masked mean of -logp * advantage, plus a small entropy term so its gradient is checked too."""
    advantages = torch.linspace(-1.0, 1.5, logps.size(0)).unsqueeze(1)  # (B, 1)
    m = mask.float()
    return (-(logps * advantages) * m).sum() / m.sum() - 0.01 * (entropies * m).sum() / m.sum()


def lora_grads(model) -> dict[str, torch.Tensor]:  # noqa: ANN001
    return {n: p.grad.clone() for n, p in model.named_parameters() if "lora_" in n and p.grad is not None}


# --------------------------------------------------------------------------------------------------------------------


def test_group_prompts_first_appearance_order() -> None:
    ids = torch.tensor([[0, 1, 2], [5, 6, 7], [0, 1, 2], [9, 9, 9], [5, 6, 7], [7, 1, 2]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1], [0, 1, 1]])
    first, inverse = prefix.group_prompts(ids, mask)
    # row 5 differs from row 0 only under padding, so it is the same prompt
    assert first.tolist() == [0, 1, 3]
    assert inverse.tolist() == [0, 1, 0, 2, 1, 0]
    assert torch.equal(ids[first][inverse] * mask, ids * mask)


@pytest.mark.parametrize(
    ("attn", "head_rows", "bucket_saving"),
    [
        ("sdpa", prefix.LOGPROB_ROWS, prefix.BUCKET_SAVING),
        ("eager", prefix.LOGPROB_ROWS, prefix.BUCKET_SAVING),
        ("sdpa", 4, prefix.BUCKET_SAVING),  # 4: several chunks, checkpointed
        ("sdpa", prefix.LOGPROB_ROWS, 0.0),  # two length buckets always
        ("eager", prefix.LOGPROB_ROWS, 1.0),  # one bucket always
    ],
)
def test_logps_loss_and_lora_grads_match_trl(  # noqa: ANN001
    tokenizer, attn: str, head_rows: int, bucket_saving: float, monkeypatch
) -> None:
    monkeypatch.setattr(prefix, "LOGPROB_ROWS", head_rows)
    monkeypatch.setattr(prefix, "BUCKET_SAVING", bucket_saving)
    model = make_policy(tokenizer, attn)
    input_ids, attention_mask, c = mixed_batch()
    completion_mask = attention_mask[:, -c:]

    ref_logps, ref_ent = trl_logps(model, input_ids, attention_mask, c)
    ref_loss = grpo_loss(ref_logps, ref_ent, completion_mask)
    ref_loss.backward()
    ref_grads = lora_grads(model)
    model.zero_grad()

    logps, ent = prefix.shared_prompt_logps(
        model, input_ids, attention_mask, c, compute_entropy=True, temperature=TEMPERATURE
    )
    loss = grpo_loss(logps, ent, completion_mask)
    loss.backward()
    grads = lora_grads(model)

    assert logps.shape == ref_logps.shape == (input_ids.size(0), c)
    assert torch.equal(logps == 0, ref_logps == 0)  # padding is zero in both
    assert rel_err(logps, ref_logps) < 1e-5
    assert torch.allclose(logps, ref_logps, atol=1e-5, rtol=1e-5)
    assert rel_err(ent, ref_ent) < 1e-5
    assert abs(loss.item() - ref_loss.item()) <= 1e-4 * abs(ref_loss.item())
    assert grads.keys() == ref_grads.keys() and len(grads) == 3 * 7 * 2  # every LoRA A and B of 3 layers
    worst = max(rel_err(grads[k], ref_grads[k]) for k in grads)
    assert worst < 1e-4, worst


def test_length_buckets_split_only_when_it_saves_enough(monkeypatch) -> None:  # noqa: ANN001
    """Known inputs: the shortest rows go apart at their own width when that saves BUCKET_SAVING of the padded
    tokens; the buckets cover every row once."""
    got = [(rows.tolist(), width) for rows, width in prefix.length_buckets(torch.tensor([3, 9, 4, 10]))]
    assert got == [([0, 2], 4), ([1, 3], 10)]  # 28 token columns instead of 40
    even = prefix.length_buckets(torch.tensor([9, 10, 10, 8]))  # at best 9 + 30 = 39 of 40: not worth a forward
    assert [(rows.tolist(), width) for rows, width in even] == [([0, 1, 2, 3], 10)]
    assert [(r.tolist(), w) for r, w in prefix.length_buckets(torch.tensor([5]))] == [([0], 5)]
    assert [(r.tolist(), w) for r, w in prefix.length_buckets(torch.tensor([0, 0]))] == [([0, 1], 1)]  # all padding
    monkeypatch.setattr(prefix, "BUCKET_SAVING", 0.5)
    assert len(prefix.length_buckets(torch.tensor([3, 9, 4, 10]))) == 1  # 30% < 50%
    lengths = torch.randint(0, 17, (32,), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(prefix, "BUCKET_SAVING", 0.0)
    buckets = prefix.length_buckets(lengths)
    assert sorted(torch.cat([rows for rows, _ in buckets]).tolist()) == list(range(32))
    assert all(int(lengths[rows].max()) <= width for rows, width in buckets)


def test_no_grad_chunks_and_disabled_adapter_match_trl(tokenizer) -> None:  # noqa: ANN001
    """The old/reference passes: no grad, TRL's `batch_size` chunking, and the base model (adapter disabled)."""
    model = make_policy(tokenizer)
    input_ids, attention_mask, c = mixed_batch(seed=3)
    with torch.no_grad():
        for adapter_off in (False, True):
            ctx = model.disable_adapter() if adapter_off else contextlib.nullcontext()
            with ctx:
                ref, _ = trl_logps(model, input_ids, attention_mask, c, compute_entropy=False, batch_size=4)
                got, ent = prefix.shared_prompt_logps(
                    model, input_ids, attention_mask, c, batch_size=4, temperature=0.7
                )
            assert ent is None
            assert rel_err(got, ref) < 1e-5
        with model.disable_adapter():
            base, _ = prefix.shared_prompt_logps(model, input_ids, attention_mask, c, temperature=0.7)
    assert rel_err(base, got) < 1e-5 and not torch.allclose(
        base, prefix.shared_prompt_logps(model, input_ids, attention_mask, c, temperature=0.7)[0].detach()
    )  # the adapter does change the numbers


def test_one_group_and_all_distinct(tokenizer) -> None:  # noqa: ANN001
    model = make_policy(tokenizer)
    input_ids, attention_mask, c = mixed_batch(seed=5)
    for rows in ([0, 2, 5, 8], [0, 1, 3, 7]):  # one prompt four times; four different prompts
        ids, mask = input_ids[rows], attention_mask[rows]
        with torch.no_grad():
            ref, ref_ent = trl_logps(model, ids, mask, c)
            got, ent = prefix.shared_prompt_logps(model, ids, mask, c, compute_entropy=True, temperature=0.7)
        assert rel_err(got, ref) < 1e-5 and rel_err(ent, ref_ent) < 1e-5


def test_prefill_and_expand_cache_equal_a_forward_over_every_row(tokenizer) -> None:  # noqa: ANN001
    """The one prefill (what the trainer and the sampler both run): the distinct prompts encoded once and expanded to
    their rows give the keys/values and last-token logits of a plain forward over every row; `copy=True` leaves the
    group cache as it was (the sampler expands it once per chunk), the default expands it in place."""
    model = make_policy(tokenizer)
    model.eval()
    input_ids, attention_mask, c = mixed_batch(seed=3)
    prompt_ids, prompt_mask = input_ids[:, :-c], attention_mask[:, :-c]  # (B, P), 4 distinct prompts in 9 rows
    first, inverse = prefix.group_prompts(prompt_ids, prompt_mask)
    with torch.no_grad():
        cache, out = prefix.prefill(
            model, prompt_ids[first], prompt_mask[first], prefix.mask_positions(prompt_mask[first]), logits_to_keep=1
        )
        plain = model(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            position_ids=prefix.mask_positions(prompt_mask),
            use_cache=True,
            logits_to_keep=1,
        )
    assert cache.layers[0].keys.shape[0] == first.numel() == 4
    kept = [layer.keys.clone() for layer in cache.layers]
    expanded = prefix.expand_cache(cache, inverse, copy=True)
    assert all(torch.equal(layer.keys, k) for layer, k in zip(cache.layers, kept, strict=True))  # untouched
    real = prompt_mask.bool()[:, None, :, None]  # (B, 1, P, 1): padding keys/values are masked, so never read
    assert len(expanded.layers) == len(plain.past_key_values.layers) == SPEC.num_hidden_layers
    for got, ref in zip(expanded.layers, plain.past_key_values.layers, strict=True):
        assert got.keys.shape == ref.keys.shape  # (B, heads, P, d)
        torch.testing.assert_close(got.keys * real, ref.keys * real, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.values * real, ref.values * real, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.logits[inverse], plain.logits, rtol=1e-5, atol=1e-5)
    assert prefix.expand_cache(cache, inverse) is cache and cache.layers[0].keys.shape[0] == input_ids.size(0)
    assert prefix.mask_positions(torch.tensor([[0, 0, 1, 1, 1]])).tolist() == [[0, 0, 0, 1, 2]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_encode_prompts_logits_are_the_last_positions_bit_for_bit(tokenizer, dtype: torch.dtype) -> None:  # noqa: ANN001
    """`encode_prompts` keeps the last position's logits through an index tensor in bfloat16 (a contiguous slice:
    torch's CPU linear copies a frozen weight per row for the strided one) and the plain slice in float32. In float32
    that is exactly what `logits_to_keep=1` (what `generate` keeps) gives. In bfloat16 the index path is exactly the
    full forward's last position; the strided slice runs as a bmm whose rounding may differ in the last bit (on an
    AMX-BF16 Xeon, 3 of 303,872 logits by one bf16 step), so there it is held to one step of bfloat16."""
    model = make_policy(tokenizer).to(dtype)
    model.requires_grad_(False)  # PEFT's frozen base, what the slow path needs
    model.eval()
    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    with torch.no_grad():
        encoded = prefix.encode_prompts(model, prompts, PAD, torch.device("cpu"))
        positions = prefix.mask_positions(encoded.mask)
        _, plain = prefix.prefill(model, encoded.ids, encoded.mask, positions, logits_to_keep=1)
        _, full = prefix.prefill(model, encoded.ids, encoded.mask, positions)
    assert encoded.logits.dtype == torch.float32 and encoded.logits.shape == (2, plain.logits.size(-1))
    if dtype == torch.float32:
        assert torch.equal(encoded.logits, plain.logits[:, -1, :].float())
    else:
        assert torch.equal(encoded.logits, full.logits[:, -1, :].float())
        step = torch.finfo(torch.bfloat16).eps * encoded.logits.abs().clamp_min(torch.finfo(torch.bfloat16).tiny)
        assert bool(((encoded.logits - plain.logits[:, -1, :].float()).abs() <= step).all())


def test_unsupported_configurations(tokenizer) -> None:  # noqa: ANN001
    model = make_policy(tokenizer)
    input_ids, attention_mask, c = mixed_batch()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    with pytest.raises(prefix.Unsupported, match="gradient checkpointing"):
        prefix.shared_prompt_logps(model, input_ids, attention_mask, c)
    model.gradient_checkpointing_disable()
    with pytest.raises(prefix.Unsupported, match="no prompt part"):
        prefix.shared_prompt_logps(model, input_ids, attention_mask, input_ids.size(1))
    with pytest.raises(prefix.Unsupported, match="not a transformers causal LM"):
        prefix.shared_prompt_logps(torch.nn.Linear(2, 2), input_ids, attention_mask, c)


# --------------------------------------------------------------------------------------------------------------------
# The trainer's rollouts (gapo.prefix.trainer_rollouts) against TRL's own `_generate_single_turn`


def varied_trainer(tmp_path, tied: bool = False, scale: float = 0.5, **overrides):  # noqa: ANN001, ANN003, ANN201
    """A SharedPromptGAPOTrainer on `varied_random_model(tokenizer, tied, scale)` (tests/test_sampling.py), fresh LoRA,
    no dropout."""
    from gapo.backends import lora_config
    from gapo.models import load_tokenizer
    from gapo.tasks.lists import make_list_selection_dataset
    from gapo.trainer import GAPOConfig, SharedPromptGAPOTrainer
    from tests.test_sampling import varied_random_model

    tokenizer = load_tokenizer("tiny-random")
    model = varied_random_model(tokenizer, tied, scale)
    model.train()  # as GRPOTrainer trains it
    args = GAPOConfig(
        output_dir=str(tmp_path / "varied"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=1,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        lora_r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        lora_target_modules=["q_proj", "v_proj"],
        shared_prompt_forward=True,
        **overrides,
    )
    return SharedPromptGAPOTrainer(
        model=model,
        reward_funcs=[_length_reward],
        args=args,
        train_dataset=make_list_selection_dataset(4, seed=0),
        processing_class=tokenizer,
        peft_config=lora_config(args),
    )


def prompt_rows(order: str, seed: int = 0) -> list[list[int]]:
    """Token-id prompts A (5 tokens), B (9), C (7), one row per letter of `order`: what TRL hands
    `_generate_single_turn` (left-padded there to the longest)."""
    g = torch.Generator().manual_seed(seed)
    prompts = {k: torch.randint(0, 150000, (n,), generator=g).tolist() for k, n in [("A", 5), ("B", 9), ("C", 7)]}
    return [prompts[k] for k in order]


def stock_rollouts(trainer, rows: list[list[int]]) -> list[list[int]]:  # noqa: ANN001
    """TRL's own `_generate_single_turn` on the same trainer (its `generate` path), completion ids only."""
    from trl import GRPOTrainer

    ids, logprobs = GRPOTrainer._generate_single_turn(trainer, rows, None, {}, trainer.num_generations)
    assert logprobs is None
    return ids


def test_trainer_rollouts_are_trls_greedy_tokens(tmp_path) -> None:  # noqa: ANN001
    """Greedy (do_sample=False through TRL's generation_kwargs) with a repetition penalty, prompts of three lengths
    interleaved and two extra EOS ids that end rows at different steps: the same completions as TRL's `generate`
    path, EOS kept and nothing after it, and finished rows dropped on the way."""
    prefix._warned.clear()
    trainer = varied_trainer(
        tmp_path, max_completion_length=8, generation_kwargs={"do_sample": False, "repetition_penalty": 1.3}
    )
    rows = prompt_rows("ABACBACB")
    first = stock_rollouts(trainer, rows)
    eos = [first[0][2], first[1][5]]  # A stops after 3 tokens, B after 6, C runs to the cap of 8
    trainer.eos_token_ids = [*trainer.eos_token_ids, *eos]  # TRL's cut after the first EOS
    trainer.generation_config.eos_token_id = trainer.eos_token_ids  # generate's (and ours) stop

    batch_sizes = []
    real_select = prefix.next_tokens

    def spy(logits, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        batch_sizes.append(logits.shape[0])
        return real_select(logits, *args, **kwargs)

    prefix.next_tokens = spy
    try:
        ours, logprobs = trainer._generate_single_turn(rows, None, {}, 4)
    finally:
        prefix.next_tokens = real_select
    stock = stock_rollouts(trainer, rows)
    assert logprobs is None and not any("generation off" in m for m in prefix._warned)
    assert ours == stock
    assert [len(c) for c in ours] == [3, 6, 3, 8, 6, 3, 8, 6] and ours[0][-1] == eos[0] and ours[1][-1] == eos[1]
    assert batch_sizes == [8, 8, 8, 5, 5, 5, 2, 2]  # A's 3 rows leave after step 3, B's 3 after step 6


def test_trainer_rollouts_sample_trls_distribution(tmp_path) -> None:  # noqa: ANN001
    """Sampling with every supported setting on (temperature, top-k, top-p, min-p, repetition penalty): the first two
    tokens of 400 rollouts per prompt from our loop and from TRL's `generate` path, a chi-square test of one
    distribution per prompt (p > 0.001). It fails when top-k, the temperature or the repetition penalty is left out of
    our loop (checked by hand: the temperature and penalty each move about a quarter of the probability here)."""
    from scipy.stats import chi2_contingency

    trainer = varied_trainer(
        tmp_path,
        tied=True,
        scale=0.3,
        max_completion_length=2,
        temperature=0.3,
        top_k=5,
        top_p=0.95,
        min_p=0.02,
        repetition_penalty=1.5,
    )
    rows = prompt_rows("AB" * 400)
    torch.manual_seed(0)
    ours, _ = trainer._generate_single_turn(rows, None, {}, 4)
    torch.manual_seed(1)
    stock = stock_rollouts(trainer, rows)
    for start in (0, 1):  # prompt A's rows, then B's
        pairs = {"ours": [tuple(c) for c in ours[start::2]], "stock": [tuple(c) for c in stock[start::2]]}
        categories = sorted(set(pairs["ours"]) | set(pairs["stock"]))
        assert 3 <= len(categories) <= 25  # top-k 5 at two steps, less after top-p/min-p; more than one outcome
        table = [[p.count(c) for c in categories] for p in pairs.values()]
        common = [i for i in range(len(categories)) if table[0][i] + table[1][i] >= 10]  # chi-square needs counts
        rest = [sum(row) - sum(row[i] for i in common) for row in table]
        table = [[row[i] for i in common] + [r] for row, r in zip(table, rest, strict=True)]
        assert chi2_contingency(table).pvalue > 1e-3, table


def test_unsupported_generation_setting_falls_back_to_trls_path(tmp_path) -> None:  # noqa: ANN001
    """A setting our loop does not implement (no_repeat_ngram_size) is found in the resolved generation config: one
    log line naming it, and TRL's own generation runs (the same greedy tokens as calling it directly)."""
    prefix._warned.clear()
    trainer = varied_trainer(
        tmp_path, max_completion_length=4, generation_kwargs={"do_sample": False, "no_repeat_ngram_size": 2}
    )
    rows = prompt_rows("AABB")
    assert prefix.trainer_rollouts(trainer, rows) is None
    assert any("no_repeat_ngram_size=2" in m and "generation off" in m for m in prefix._warned)
    ours, _ = trainer._generate_single_turn(rows, None, {}, 2)
    assert ours == stock_rollouts(trainer, rows)
    trainer.args.shared_prompt_forward = False
    prefix._warned.clear()
    assert prefix.trainer_rollouts(trainer, rows) is None
    assert any("shared_prompt_forward is off" in m for m in prefix._warned)


def _length_reward(completions, **kwargs):  # noqa: ANN001, ANN003, ANN202
    """A per-completion reward with spread, so advantages (and gradients) are not all zero."""
    return [float(len(c[-1]["content"] if isinstance(c, list) else c) % 7) for c in completions]


def test_trainer_step_matches_stock_trl(tmp_path) -> None:  # noqa: ANN001
    """One SharedPromptGAPOTrainer step (its rollouts and shared-prompt log-probs) against TRL's GRPOTrainer on
    tiny-random fed the same completions: same loss, same gradient norm; and `rollouts` logged (G=4 completions)."""
    from transformers.trainer_utils import set_seed
    from trl import GRPOConfig, GRPOTrainer

    from gapo.backends import lora_config
    from gapo.models import load_tokenizer
    from gapo.tasks.lists import make_list_selection_dataset
    from gapo.trainer import GAPOConfig, SharedPromptGAPOTrainer

    prefix._warned.clear()  # fallback notes are once per process: forget those of earlier tests
    tokenizer = load_tokenizer("tiny-random")
    dataset = make_list_selection_dataset(1, seed=0)
    common = dict(
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        learning_rate=1e-3,
        seed=0,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        temperature=TEMPERATURE,
    )
    gapo_args = GAPOConfig(
        output_dir=str(tmp_path / "g"),
        **common,
        lora_r=4,
        lora_alpha=8,
        lora_dropout=0.0,
        lora_target_modules=["q_proj", "v_proj"],
        shared_prompt_forward=True,
    )
    results, generated = {}, {}
    for name, cls, args in (
        ("gapo", SharedPromptGAPOTrainer, gapo_args),
        ("trl", GRPOTrainer, GRPOConfig(output_dir=str(tmp_path / "t"), **common)),
    ):
        set_seed(0)
        model = tiny_random_model(tokenizer, SPEC)
        trainer = cls(
            model=model,
            reward_funcs=[_length_reward],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(gapo_args),
        )
        if name == "gapo":
            real = trainer._generate_single_turn

            def record(prompt_ids, *args, real=real):  # noqa: ANN001, ANN002, ANN202
                generated["prompts"] = prompt_ids
                generated["completions"], _ = real(prompt_ids, *args)
                return generated["completions"], None

            trainer._generate_single_turn = record
        else:

            def replay(prompt_ids, *args):  # noqa: ANN001, ANN002, ANN202
                assert prompt_ids == generated["prompts"]
                return generated["completions"], None

            trainer._generate_single_turn = replay
        trainer.train()
        results[name] = trainer.state.log_history[0]
        if name == "gapo":
            assert getattr(trainer, "_shared_prompt_note", None) is None  # the shared log-prob path ran
            assert not any("generation off" in m for m in prefix._warned)  # and our rollouts
    trl_log, gapo_log = results["trl"], results["gapo"]
    assert len({tuple(c) for c in generated["completions"]}) > 1  # a group with spread, so the gradient is not zero
    assert gapo_log["rollouts"] == 4 and "rollouts" not in trl_log
    assert trl_log["grad_norm"] > 0
    assert abs(gapo_log["loss"] - trl_log["loss"]) <= 1e-4 * max(abs(trl_log["loss"]), 1e-3)
    assert abs(gapo_log["grad_norm"] - trl_log["grad_norm"]) <= 1e-4 * trl_log["grad_norm"]
