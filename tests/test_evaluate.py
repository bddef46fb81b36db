"""`gapo eval` (issue 22): bad input is one line before any sampling; real runs on tiny-random, `embedded` and a real
local OpenAI-compatible server (vLLM's CPU build); a run killed midway leaves no eval.json."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_fixtures import vllm_server

from gapo.cli import main
from gapo.repro import evaluate
from gapo.repro.prompts import HELDIN_LISTS
from gapo.repro.prompts import OPEN_SET_PROMPTS as PAPER

ROOT = Path(__file__).resolve().parents[1]


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str], match: str) -> None:
    """`gapo eval ARGV` exits 2 with one ``gapo: error:`` line containing `match`."""
    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gapo: error: ") and "\n" not in err, err
    assert match in err, err


# --- bad input: one line, before any model loads or any sample is drawn ---------------------------------------------


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--suite", "lists,poems"], "unknown suite 'poems'; choose from lists, open, creativity"),
        (["-n", "1"], "-n must be at least 2"),
        (["--suite", "open", "--lists", "x.yaml"], "--lists is given but suite 'lists' is not run"),
        (["--compare", "tiny-random"], "is the model already evaluated"),
        (["--compare", "tiny-random:no/such/adapter"], "no LoRA adapter at 'no/such/adapter'"),
        (["--model", "no-such/model"], "unknown model 'no-such/model'"),
    ],
)
def test_bad_flags_are_one_line(capsys, tmp_path: Path, extra: list[str], match: str) -> None:  # noqa: ANN001
    argv = ["--model", "tiny-random", "--out", str(tmp_path / "ev"), *extra]
    if "--model" in extra:
        argv = argv[2:]
    _fails(capsys, argv, match)
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("one.yaml", "planets: [Mars]\n", "list 'planets' has 1 item(s); uniformity needs at least 2"),
        ("dup.yaml", "- name: planets\n  items: [Mars, Venus, 'mars.']\n", "duplicate items 'Mars' and 'mars.'"),
        ("dup.jsonl", '{"name": "p", "items": ["a", "b"]}\n{"name": "q", "items": ["x", "X"]}\n', "list 'q' has dup"),
        ("bad.jsonl", '{"name": "p", "items": ["a", "b"]}\n{oops\n', "line 2 is not JSON"),
        ("lists.txt", "planets: [Mars, Venus]\n", "give a .yaml, .yml or .jsonl file"),
    ],
)
def test_bad_lists_files_are_one_line(capsys, tmp_path: Path, name: str, text: str, match: str) -> None:  # noqa: ANN001
    (tmp_path / name).write_text(text)
    _fails(capsys, ["--model", "tiny-random", "--lists", str(tmp_path / name), "--out", str(tmp_path / "ev")], match)
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize(
    ("extra", "suites"),
    [
        (["--suite", "open,lists"], ["open", "lists", "heldin"]),
        (["--suite", "lists", "--no-heldin"], ["lists"]),
        (["--suite", "open"], ["open"]),
        (["--suite", "lists", "--lists", "LISTS"], ["lists"]),  # the user's own lists: no held-in beside them
    ],
)
def test_the_heldin_lists_go_with_the_papers_lists(tmp_path: Path, extra: list[str], suites: list[str]) -> None:
    lists = tmp_path / "lists.yaml"
    lists.write_text("mine: [a, b, c]\n")
    argv = ["--model", "tiny-random", "--out", str(tmp_path / "o"), *[str(lists) if a == "LISTS" else a for a in extra]]
    assert evaluate.plan(evaluate.build_parser().parse_args(argv)).suites == suites


def test_lists_and_questions_files_are_read_as_yaml_or_jsonl(tmp_path: Path) -> None:
    (tmp_path / "l.yaml").write_text("planets: [Mars, Venus]\nmetals: [gold, silver, iron]\n")
    (tmp_path / "l.jsonl").write_text('{"name": "planets", "items": ["Mars", "Venus"]}\n')
    (tmp_path / "q.yaml").write_text("- name: river\n  question: Name a river.\n")
    assert evaluate.read_lists(tmp_path / "l.yaml") == {
        "planets": ["Mars", "Venus"],
        "metals": ["gold", "silver", "iron"],
    }
    assert evaluate.read_lists(tmp_path / "l.jsonl") == {"planets": ["Mars", "Venus"]}
    assert evaluate.read_questions(tmp_path / "q.yaml") == {"river": "Name a river."}


def test_own_questions_have_no_paper_mean(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """With ``--questions FILE`` none of the paper's questions is asked: no paper's-ten mean, "-" in its row."""
    (tmp_path / "q.yaml").write_text("- name: river\n  question: Name a river.\n")
    argv = ["--model", "tiny-random", "--suite", "open", "--questions", str(tmp_path / "q.yaml"), "-n", "2"]
    assert main(["eval", *argv, "--max-new-tokens", "2", "--out", str(tmp_path / "ev")]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["open/unique_at_n_paper"] == ["-"] and rows["open/unique_at_n"] != ["-"]
    doc = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert "mean_unique_at_n_paper" not in doc["models"]["tiny-random"]
    assert [r["category"] for r in doc["tables"]["open"]] == ["river"]


def test_an_adapter_of_another_base_model_is_one_line(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-7B-Instruct"}))
    argv = ["--model", "tiny-random", "--adapter", str(adapter), "--out", str(tmp_path / "ev")]
    _fails(capsys, argv, f"adapter '{adapter}' was trained on 'Qwen/Qwen2.5-7B-Instruct', not on 'tiny-random'")
    from gapo.models import resolve_model_path

    # the same base recorded as a directory with the same configuration passes the check (it is that model)
    base = resolve_model_path("tiny-random")
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    evaluate.check_adapter_base("tiny-random", str(adapter))
    # trained on another machine (a GPU's stage folder, absent here): gapo's cache layout <cache>/<name>/model names it
    elsewhere = str(tmp_path / "gpu" / "cache" / "tiny-random" / "model")
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": elsewhere}))
    evaluate.check_adapter_base("tiny-random", str(adapter))
    argv[1] = "embedded"
    _fails(capsys, argv, f"adapter '{adapter}' was trained on '{elsewhere}', not on 'embedded'")


def test_an_endpoint_that_does_not_answer_in_time_is_one_line(capsys, tmp_path: Path) -> None:  # noqa: ANN001
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        start = time.monotonic()
        argv = ["--model", "m", "--backend", "openai", "--endpoint", url, "--timeout", "1", "--out", str(tmp_path)]
        _fails(capsys, argv, f"endpoint {url}/models did not answer within 1 s")
        assert time.monotonic() - start < 10
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens here
    _fails(capsys, [*argv[:5], f"http://127.0.0.1:{port}", *argv[6:]], "did not answer within 1 s")


# --- real runs ----------------------------------------------------------------------------------------------------


def test_eval_on_tiny_random_with_compare_writes_every_output(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from gapo.models import resolve_model_path

    same_weights = resolve_model_path("tiny-random")  # the same model by another name: every paired difference is 0
    out = tmp_path / "ev"
    argv = ["--model", "tiny-random", "--compare", same_weights, "--suite", "lists,open", "-n", "3"]
    assert main(["eval", *argv, "--max-new-tokens", "4", "--resamples", "50", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["metric", "tiny-random", same_weights, "difference", "(2nd", "-", "1st)"]
    assert [line.split()[0] for line in printed[2:]] == [
        f"{suite}/{m.removeprefix('mean_')}" for suite in ("lists", "heldin", "open") for m in evaluate.HEADLINES[suite]
    ]
    doc = json.loads((out / "eval.json").read_text())
    first, second = doc["models"]["tiny-random"], doc["models"][same_weights]
    for key in ("mean_invalid", "mean_jsd", "mean_jsd_valid", "mean_top_share", "mean_unique_at_n"):
        assert key in first and first[key] == second[key]
    assert second["mean_jsd_diff"] == 0 and second["mean_unique_at_n_diff"] == 0
    # Unique@n over the paper's ten questions alone (the number its Table 8 reports), beside the mean over all asked
    paper = [r["unique_at_n"] for r in doc["tables"]["open"] if r["model"] == "tiny-random" and r["category"] in PAPER]
    assert len(paper) == len(PAPER) < len(doc["tables"]["open"]) // 2
    assert first["mean_unique_at_n_paper"] == pytest.approx(sum(paper) / len(paper))
    assert second["mean_unique_at_n_paper_diff"] == 0 == second["mean_unique_at_n_paper_diff_ci_low"]
    # the held-in lists apart (issue 34): their own summary and paired differences, never merged into the unseen ones
    assert first["heldin"]["mean_jsd"] == second["heldin"]["mean_jsd"] and second["heldin"]["mean_jsd_diff"] == 0
    assert [r["category"] for r in doc["tables"]["heldin"]] == list(HELDIN_LISTS) * 2
    assert doc["settings"]["suites"] == ["lists", "heldin", "open"] and doc["settings"]["heldin_lists"] == {
        k: list(v) for k, v in HELDIN_LISTS.items()
    }
    assert {r["model"] for r in doc["tables"]["lists"]} == {"tiny-random", same_weights}
    assert doc["environment"]["packages"]["transformers"] and doc["environment"]["torch_threads"] >= 1  # where it ran
    assert all("top_share" in r for r in doc["tables"]["lists"]) and doc["tables"]["open_curves"]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    lists, questions = len(doc["tables"]["lists"]) // 2, len(doc["tables"]["open"]) // 2
    assert len(samples) == 2 * 3 * (lists + len(HELDIN_LISTS) + questions)
    assert {s["suite"] for s in samples} == {"lists", "heldin", "open"}
    assert (out / "eval.png").read_bytes()[:4] == b"\x89PNG"
    # tools/transfer_table.py --eval reads this file as written: a row per model and a mean row, both sets scored,
    # "-" where no answer was valid (tiny-random's), so its tables of runs stay in step with eval.json's schema
    table = [[c.strip() for c in line.split("|")[1:-1]] for line in _transfer_table("--eval", f"x={out}")[2:]]
    assert [row[1] for row in table] == [f"{out} (tiny-random)", f"{out} ({same_weights})", "-"]
    assert all(len(row) == 10 for row in table)
    assert all(row[2] != "-" and row[6] != "-" for row in table)


def _transfer_table(*argv: str) -> list[str]:
    """tools/transfer_table.py's printed lines, run as its docs run it."""
    command = [sys.executable, str(ROOT / "tools" / "transfer_table.py"), *argv]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()


def test_eval_creativity_suite_on_tiny_random(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from gapo.models import resolve_model_path

    out, same_weights = tmp_path / "ev", resolve_model_path("tiny-random")
    argv = ["--model", "tiny-random", "--compare", same_weights, "--suite", "creativity", "-n", "2", "--out", str(out)]
    assert main(["eval", *argv, "--max-new-tokens", "6", "--encoder", "all-MiniLM-L6-v2", "--resamples", "50"]) == 0
    assert "creativity/one_minus_self_bleu" in capsys.readouterr().out
    doc = json.loads((out / "eval.json").read_text())
    first, second = doc["models"]["tiny-random"], doc["models"][same_weights]
    assert first["mean_embedding_distance_ci_low"] <= first["mean_embedding_distance"]
    assert second["mean_embedding_distance_diff"] == 0 and second["mean_one_minus_self_bleu_diff"] == 0
    assert doc["settings"]["encoder"] == "all-MiniLM-L6-v2" and doc["tables"]["creativity"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def test_a_run_killed_midway_leaves_no_eval_json(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    argv = ["--model", "tiny-random", "--suite", "lists", "-n", "2000", "--max-new-tokens", "32", "--out", str(out)]
    process = subprocess.Popen(
        [sys.executable, "-m", "gapo.cli", "eval", *argv], stderr=subprocess.PIPE, text=True, env=_env()
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:  # sampling has begun: the lists suite announces itself before its first sample
            if line.startswith("gapo eval: lists"):
                break
        time.sleep(2.0)
        assert process.poll() is None, "the run ended before it could be killed"
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=30)
    assert not (out / "eval.json").exists()


@pytest.mark.embedded
@pytest.mark.slow
def test_eval_on_embedded_reports_format_and_distribution_per_list(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "ev"
    assert (
        main(["eval", "--model", "embedded", "--suite", "lists", "-n", "4", "--resamples", "100", "--out", str(out)])
        == 0
    )
    assert "lists/jsd_valid" in capsys.readouterr().out
    doc = json.loads((out / "eval.json").read_text())
    summary = doc["models"]["embedded"]
    assert {"mean_jsd", "mean_jsd_valid", "mean_invalid", "mean_top_share"} <= set(summary)
    assert 0 <= summary["mean_invalid"] <= 1 and 0 <= summary["mean_jsd"] <= 1
    rows = doc["tables"]["lists"]
    assert len(rows) == 10 and all(0 <= r["top_share"] <= 1 for r in rows)
    assert len(doc["tables"]["heldin"]) == 10 and 0 <= summary["heldin"]["mean_jsd"] <= 1


# --- a real OpenAI-compatible server: vLLM's CPU build ----------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A random Qwen2 with the real tokenizer and head_dim 64 (vLLM's CPU attention has no kernel for tiny-random's 4),
    served by vLLM on 127.0.0.1."""
    pytest.importorskip("vllm")
    from gapo.models import load_tokenizer
    from gapo.repro.offline import TinyRandomSpec, tiny_random_model

    directory = tmp_path_factory.mktemp("served") / "model"
    tokenizer = load_tokenizer("tiny-random")
    spec = TinyRandomSpec(hidden_size=64, intermediate_size=64, num_attention_heads=1, num_key_value_heads=1)
    tiny_random_model(tokenizer, spec).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    flags = ("--served-model-name", "tiny64", "--max-num-seqs", "16")
    with vllm_server(
        str(directory), *flags, env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    ) as url:
        yield url


@pytest.mark.vllm
def test_openai_backend_draws_no_sample_twice_from_vllm(served: str) -> None:
    """vLLM seeds a request's k-th choice with seed + k: requests seeded 0, 1, ... returned shifted copies of each
    other's samples. Random 16-token texts from a random model are all distinct unless a seed repeats."""
    from gapo.repro.sampling import OpenAIBackend, SamplingParams

    backend = OpenAIBackend(served, "tiny64", max_n_per_request=4)
    prompts = [[{"role": "user", "content": "Name a planet."}]]
    texts = backend.generate(prompts, 12, SamplingParams(seed=0, temperature=1.0, max_new_tokens=16))[0]
    assert len(texts) == 12 and len(set(texts)) == 12, texts
    again = backend.generate(prompts, 12, SamplingParams(seed=0, temperature=1.0, max_new_tokens=16))[0]
    assert again == texts  # seeded: the same run twice gives the same samples


@pytest.mark.vllm
@pytest.mark.slow
def test_eval_against_a_real_vllm_server(served: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "ev"
    argv = ["--model", "tiny64", "--backend", "openai", "--endpoint", served, "--suite", "lists,open", "-n", "3"]
    assert main(["eval", *argv, "--max-new-tokens", "8", "--resamples", "50", "--out", str(out)]) == 0
    assert "lists/jsd" in capsys.readouterr().out
    doc = json.loads((out / "eval.json").read_text())
    assert doc["settings"]["backend"] == "openai" and doc["settings"]["endpoint"] == served
    assert {"mean_jsd", "mean_jsd_valid", "mean_invalid", "mean_unique_at_n"} <= set(doc["models"]["tiny64"])
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["model"] == "tiny64" for s in samples)
    # the server answers; a model it does not serve is one line before any sampling
    _fails(capsys, ["--model", "other", *argv[2:], "--out", str(tmp_path / "x")], "serves ['tiny64'], not 'other'")
