"""The pipeline's wiring: profiles in params.yaml, dvc.yaml against the notebooks, and DVC failing loudly.

Fast checks (no model) plus one real `dvc repro` of a tiny project whose notebook raises: the run must fail and show
the failing cell's error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from gapo.config import DATA_SETTINGS, DATA_USERS
from gapo.repro import pipeline, profiles
from gapo.repro.stages import common, training

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
BIN = Path(sys.executable).parent
DVC_YAML: dict = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))

REQUIRED_FIGURES = {
    "figures/fig2_bias.png",
    "figures/fig4_uniformity.png",
    "figures/fig5_open_set.png",
    "figures/fig6_tsne_haiku.png",
    "figures/fig7_creativity_coherence.png",
    "figures/fig8_uniformity_all.png",
    "figures/fig8_uniformity_heldin.png",  # issue 34: held-in lists beside Figure 8
    "figures/fig9_open_set_all.png",
    "figures/open_ended.png",
    "figures/targets.png",
    "figures/table1_creativity.csv",
    "figures/table2_benchmarks.csv",
    "figures/table8_baselines.csv",
}
REQUIRED_METRICS = {
    "metrics/uniformity.json",
    "metrics/open_set.json",
    "metrics/creativity.json",
    "metrics/benchmarks.json",
    "metrics/open_ended.json",
    "metrics/targets.json",
}


def _entries(stage: dict, kind: str) -> dict[str, dict]:
    out = {}
    for entry in stage.get(kind) or []:
        if isinstance(entry, dict):
            (path, options), *_ = entry.items()
            out[path] = options or {}
        else:
            out[entry] = {}
    return out


def _run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **env}
    return subprocess.run(cmd, cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)


# --------------------------------------------------------------------------------------------------------------------
# Profiles
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["embedded", "paper", "smoke"])
def test_every_profile_resolves_for_every_stage(profile: str) -> None:
    for stage, sections in profiles.STAGES.items():
        params = profiles.stage_params(stage, profile, PARAMS)
        assert params["profile"] == profile and set(sections) <= set(params)


def test_default_profile_is_embedded_and_its_sizes_are_the_top_level_sections() -> None:
    data = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
    assert data["profile"] == "embedded"
    dataset_settings = {k: v for k, v in data["data"].items() if k in DATA_SETTINGS}  # train's, from `data`
    assert profiles.resolve(None, PARAMS)["train"] == {**dataset_settings, **data["train"]}
    assert profiles.resolve("smoke", PARAMS)["train"]["model"] == "tiny-random"
    assert profiles.resolve("paper", PARAMS)["models"]["gapo"]["model"] == "Qwen/Qwen2.5-32B-Instruct"


def test_entry_point_sections_stay_readable_by_their_commands() -> None:
    """`gapo train --params params.yaml --section train`, `gapo data` and `gapo sft` read their sections as is."""
    from gapo.config import config_from_cli
    from gapo.repro.sft import SFTConfig
    from gapo.repro.stages.generate import DataConfig
    from gapo.train import configs, parse_args

    script, train = parse_args(["--params", str(PARAMS)])
    raw = yaml.safe_load(PARAMS.read_text())["train"]
    assert script.model == "embedded" and train.num_generations == raw["num_generations"] == 32
    assert train.max_steps == raw["max_steps"]
    assert train.per_device_train_batch_size == raw["per_device_train_batch_size"]
    (data,) = config_from_cli([DataConfig], ["--params", str(PARAMS)], "gapo data", "data", "")
    assert data.num_prompts == script.num_prompts and data.seed == train.seed
    assert data.response_prefix == script.response_prefix
    config_from_cli([SFTConfig], ["--params", str(PARAMS)], "gapo sft", "sft", "")
    for profile in ("paper", "smoke"):  # the other profiles build valid configs too
        resolved = profiles.resolve(profile, PARAMS)
        configs(resolved["train"]), DataConfig(**resolved["data"]), SFTConfig(**resolved["sft"])


def test_dataset_settings_live_in_the_data_section_only() -> None:
    """params.yaml sets num_prompts, seed, list sizes and the prefix in `data`; `train` and `sft` get them from it, in
    every profile, so the train stage's check (the dataset equals data/train.jsonl) holds by construction."""
    from gapo.repro.stages.generate import DataConfig
    from gapo.tasks.lists import list_selection_rows
    from gapo.train import configs

    raw = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
    for sections in [raw, *raw["profiles"].values()]:
        for section in DATA_USERS:
            assert not set(sections[section] or {}) & set(DATA_SETTINGS), section
    for profile in ("embedded", "paper", "smoke"):
        resolved = profiles.resolve(profile, PARAMS)
        settings = {k: v for k, v in resolved["data"].items() if k in DATA_SETTINGS}
        for section in DATA_USERS:
            assert {k: resolved[section][k] for k in settings} == settings, (profile, section)
    smoke = profiles.stage_params("train_gapo", "smoke", PARAMS)
    (script, train), data = configs(smoke["train"]), DataConfig(**smoke["data"])
    assert script.num_prompts == 16 and script.response_prefix == data.response_prefix is None  # no pre-fill (issue 14)
    args = (
        script.num_prompts,
        train.seed,
        script.min_items,
        script.max_items,
        script.categories,
        script.response_prefix,
    )
    assert list_selection_rows(*args) == list_selection_rows(
        data.num_prompts, data.seed, data.min_items, data.max_items, data.categories, data.response_prefix
    )
    paper = profiles.resolve("paper", PARAMS)
    assert paper["train"]["num_prompts"] == paper["sft"]["num_prompts"] == 4096
    assert paper["train"]["response_prefix"] is None


@pytest.mark.parametrize("section", DATA_USERS)
def test_a_repeated_dataset_setting_is_a_one_line_error(tmp_path: Path, section: str) -> None:
    data = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
    data[section]["num_prompts"] = 64
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(profiles.PipelineError, match=re.escape(f"[{section}] sets num_prompts, which it takes from")):
        profiles.resolve("smoke", path)
    del data["profiles"]  # a plain params file (no profiles), read by `gapo train`/`gapo sft` as is
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    from gapo.config import profile_section

    with pytest.raises(ValueError, match=re.escape(f"[{section}] sets num_prompts")):
        profile_section(path, section)
    del data[section]["num_prompts"]
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert profile_section(path, section)["num_prompts"] == data["data"]["num_prompts"]


def test_unknown_profile_is_a_one_line_error() -> None:
    with pytest.raises(profiles.PipelineError, match="unknown profile 'gpu'; params.yaml defines: embedded, paper"):
        profiles.stage_params("uniformity", "gpu", PARAMS)
    result = _run([sys.executable, "-m", "gapo.repro.pipeline", "--params", str(PARAMS), "check", "gpu"], REPO)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("gapo: error: unknown profile 'gpu'")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["profiles"]["smoke"]["open_set"].update(samples=3), "overrides unknown keys of \\[open_set\\]"),
        (lambda d: d["profiles"]["smoke"].pop("bias"), "must list every section"),
        (lambda d: d["profiles"]["smoke"]["uniformity"].update(models=["baseline", "gapo2"]), "unknown models"),
        (lambda d: d["profiles"]["smoke"]["open_ended"].update(list_gapo="gapo2"), "open_ended.list_gapo 'gapo2'"),
    ],
)
def test_broken_profiles_fail_with_a_fix(tmp_path: Path, edit, message: str) -> None:  # noqa: ANN001
    data = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(profiles.PipelineError, match=message):
        profiles.resolve("smoke", path)


def test_use_sets_the_profile_line_and_keeps_comments(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    shutil.copy(PARAMS, path)
    profiles.set_profile("smoke", path)
    text = path.read_text(encoding="utf-8")
    assert re.search(r"(?m)^profile: smoke$", text) and "# Parameters of every pipeline stage" in text
    assert text.replace("profile: smoke", "profile: embedded", 1) == PARAMS.read_text(encoding="utf-8")
    with pytest.raises(profiles.PipelineError, match="unknown profile"):
        profiles.set_profile("nope", path)
    assert "profile: smoke" in path.read_text(encoding="utf-8")


def test_overrides_apply_only_to_the_stage_sections() -> None:
    params = profiles.stage_params("uniformity", "smoke", PARAMS, {"uniformity": {"n": 7}})
    assert params["uniformity"]["n"] == 7
    with pytest.raises(profiles.PipelineError, match="has no section 'train'"):
        profiles.stage_params("uniformity", "smoke", PARAMS, {"train": {"max_steps": 1}})


# --------------------------------------------------------------------------------------------------------------------
# dvc.yaml against the notebooks and the deliverables
# --------------------------------------------------------------------------------------------------------------------


def test_one_stage_per_notebook_running_papermill_with_the_profile() -> None:
    stages = DVC_YAML["stages"]
    assert list(stages) == list(profiles.STAGES)
    assert sorted(profiles.NOTEBOOKS.values()) == sorted(
        f"notebooks/{p.name}" for p in (REPO / "notebooks").glob("*.ipynb")
    )
    for name, stage in stages.items():
        notebook = profiles.NOTEBOOKS[name]
        executed = f"outputs/notebooks/{Path(notebook).name}"
        assert f"papermill ${{repo}}{notebook} {executed}" in stage["cmd"] and "-p profile ${profile}" in stage["cmd"]
        assert f"${{repo}}{notebook}" in stage["deps"] and "${repo}gapo/repro/profiles.py" in stage["deps"]
        for dep in stage["deps"]:  # read from the repository (`${repo}`), or another stage's output in the folder
            assert (
                dep.startswith("${repo}")
                or dep in ("data/train.jsonl", "models/gapo", "models/sft")
                or (dep.startswith("metrics/"))
            ), dep
        assert executed in _entries(stage, "outs")
        sections = profiles.STAGES[name]
        assert stage["params"] == ["profile", *sections, *(f"profiles.${{profile}}.{s}" for s in sections)]


def test_dvc_yaml_declares_exactly_the_required_figures_and_metrics_uncached() -> None:
    declared: dict[str, dict] = {}
    metrics: set[str] = set()
    for stage in DVC_YAML["stages"].values():
        for kind in ("outs", "metrics", "plots"):
            declared.update(_entries(stage, kind))
        metrics.update(_entries(stage, "metrics"))
    figures = {p for p in declared if p.startswith("figures/")}
    assert figures == REQUIRED_FIGURES
    assert {p for p in declared if p.startswith("metrics/")} == REQUIRED_METRICS == metrics
    for path in figures | metrics | {p for p in declared if p.startswith("results/")}:
        assert declared[path].get("cache") is False, f"{path} is committed to git: declare it cache: false"
    for cached in ("data/train.jsonl", "models/gapo", "models/sft"):
        assert cached in declared and declared[cached].get("cache", True) is True


def test_committed_notebooks_are_stripped_and_parameterised() -> None:
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} carries outputs"
        tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1 and code[0] is tagged[0], f"{path.name}: the first code cell must be `parameters`"
        assert re.search(r'(?m)^profile = "embedded"', tagged[0].source) and "params_file" in tagged[0].source
        assert nb.metadata["kernelspec"]["name"] == "python3"
        assert "from gapo.repro import plotting, profiles" in code[1].source


def _checkpoint(path: Path, step: int, complete: bool = True) -> None:
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    save_file({"w": __import__("torch").zeros(2)}, str(path / "adapter_model.safetensors"))
    if complete:  # transformers writes trainer_state.json last: without it, the save was cut short
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_prepare_run_dir_resumes_only_an_unfinished_run_of_the_same_config(tmp_path: Path) -> None:
    from gapo.train import configs, run_config

    config = run_config(*configs({"model": "tiny-random", "max_steps": 4, "output_dir": str(tmp_path / "run")}))
    run = tmp_path / "run"
    assert training.prepare_run_dir(run, config) is False  # nothing there
    _checkpoint(run / "checkpoint-2", 2, complete=False)  # killed during its only save: nothing to resume
    (run / "config.json").write_text(json.dumps({**config, "resume": False}))
    assert training.prepare_run_dir(run, {**config, "resume": True}) is False and not run.exists()
    _checkpoint(run / "checkpoint-2", 2)
    _checkpoint(run / "checkpoint-4", 4, complete=False)  # a later save cut short: resume from checkpoint-2
    (run / "config.json").write_text(json.dumps({**config, "resume": False}))
    assert training.prepare_run_dir(run, {**config, "resume": True}) is True
    assert training.prepare_run_dir(run, {**config, "max_steps": 8}) is False and not run.exists()
    (run / "adapter").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(config))
    assert training.prepare_run_dir(run, config) is False and not run.exists()  # finished: start afresh


def test_metrics_files_are_models_first_and_json_clean(tmp_path: Path) -> None:
    path = common.write_metrics(tmp_path / "m.json", {"baseline": {"mean_jsd": float("nan")}}, profile="smoke")
    assert json.loads(path.read_text()) == {"models": {"baseline": {"mean_jsd": None}}, "profile": "smoke"}


# --------------------------------------------------------------------------------------------------------------------
# DVC runs papermill and fails with the failing cell's error
# --------------------------------------------------------------------------------------------------------------------


def _notebook(path: Path, *sources: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_a_failing_notebook_makes_dvc_repro_fail_with_the_cell_error(tmp_path: Path) -> None:
    _notebook(tmp_path / "ok.ipynb", 'profile = "embedded"', 'open("ok.txt", "w").write(profile)')
    _notebook(tmp_path / "fail.ipynb", 'profile = "embedded"', 'raise ValueError(f"boom in the cell: {profile}")')
    (tmp_path / "params.yaml").write_text("profile: smoke\n")
    stage = "papermill {0}.ipynb out_{0}.ipynb -k python3 --log-output --no-progress-bar -p profile ${{profile}}"
    (tmp_path / "dvc.yaml").write_text(
        yaml.safe_dump(
            {
                "stages": {
                    "ok": {"cmd": stage.format("ok"), "deps": ["ok.ipynb"], "params": ["profile"], "outs": ["ok.txt"]},
                    "fail": {"cmd": stage.format("fail"), "deps": ["fail.ipynb", "ok.txt"], "outs": ["out_fail.ipynb"]},
                }
            }
        )
    )
    assert _run([str(BIN / "dvc"), "init", "--no-scm", "-q"], tmp_path).returncode == 0
    result = _run([str(BIN / "dvc"), "repro"], tmp_path)
    output = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout + result.stderr)  # IPython colours tracebacks
    assert result.returncode != 0
    assert (tmp_path / "ok.txt").read_text() == "smoke"  # the stage before it ran, with the profile passed through
    assert "ValueError: boom in the cell: smoke" in output
    assert "failed to reproduce 'fail'" in output


def test_dvc_rejects_an_unknown_profile_in_one_line(tmp_path: Path) -> None:
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    text = PARAMS.read_text(encoding="utf-8")
    (tmp_path / "params.yaml").write_text(text.replace("profile: embedded", "profile: gpu", 1), encoding="utf-8")
    for stage in DVC_YAML["stages"].values():  # the source files present, so that DVC gets as far as the params
        for dep in (d.removeprefix("${repo}") for d in stage["deps"]):
            if dep.startswith(("notebooks/", "gapo/")) and Path(dep).suffix:
                (tmp_path / dep).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / dep).touch()
    assert _run([str(BIN / "dvc"), "init", "--no-scm", "-q"], tmp_path).returncode == 0
    result = _run([str(BIN / "dvc"), "repro", "--dry"], tmp_path)
    assert result.returncode != 0
    assert re.search(r"Parameters 'profiles\.gpu\.\w+' are missing from 'params\.yaml'", result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------------------------------------------------
# Profiles never write the committed results
# --------------------------------------------------------------------------------------------------------------------

TRACKED_RESULTS = ["figures", "metrics", "results", "dvc.lock", "params.yaml", "dvc.yaml"]


def _tracked_state() -> str:
    """`git status` of the committed results plus their content hashes (a rewrite with equal bytes is no change)."""
    status = _run(["git", "status", "--porcelain", "--", *TRACKED_RESULTS], REPO)
    hashes = _run(["git", "ls-files", "-s", "--", *TRACKED_RESULTS], REPO)
    files = sorted(p for p in (REPO / d for d in TRACKED_RESULTS) for p in ([p] if p.is_file() else p.rglob("*")))
    return status.stdout + hashes.stdout + "".join(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}\n" for f in files)


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="needs the git checkout")
def test_a_non_default_profile_runs_in_its_own_workspace() -> None:
    """`make reproduce PROFILE=smoke`'s mechanism: `use smoke` prints a folder; `dvc repro` there (here its first
    stage) writes its results, dvc.lock and params there, and no tracked file of the repository changes. The folder
    holds no source: dvc.yaml is a link, the notebooks and code are read from the repository (`${repo}`)."""
    before = _tracked_state()
    use = _run([sys.executable, "-m", "gapo.repro.pipeline", "--params", str(PARAMS), "use", "smoke"], REPO)
    assert use.returncode == 0, use.stderr
    workspace = Path(use.stdout.strip())
    assert workspace == REPO / "runs" / "profiles" / "smoke" and "run `dvc repro` in" in use.stderr
    params = (workspace / "params.yaml").read_text()
    assert re.search(r"(?m)^profile: smoke$", params) and re.search(r'(?m)^repo: "../../../"$', params)
    assert (workspace / "dvc.yaml").is_symlink() and (workspace / "dvc.yaml").resolve() == REPO / "dvc.yaml"
    assert not (workspace / "gapo").exists() and not (workspace / "notebooks").exists()
    repro = _run([str(BIN / "dvc"), "repro", "generate"], workspace, HF_HUB_OFFLINE="1")
    assert repro.returncode == 0, repro.stdout[-2000:] + repro.stderr[-2000:]
    assert len((workspace / "data" / "train.jsonl").read_text().splitlines()) == 16  # the smoke size
    assert (workspace / "results" / "data_summary.csv").is_file()
    lock = yaml.safe_load((workspace / "dvc.lock").read_text())["stages"]["generate"]
    assert "../../../gapo/tasks/lists.py" in [d["path"] for d in lock["deps"]]  # the repository's code, not a copy
    assert _tracked_state() == before
    # The default profile runs in the repository itself (and sets params.yaml back to it, were it changed).
    again = _run([sys.executable, "-m", "gapo.repro.pipeline", "--params", str(PARAMS), "use", "embedded"], REPO)
    assert again.returncode == 0 and Path(again.stdout.strip()) == REPO
    assert _tracked_state() == before


def test_use_removes_a_source_copy_an_older_gapo_left_in_the_workspace(tmp_path: Path) -> None:
    """A gapo/ copied into runs/profiles/<name>/ by an older version would shadow the installed package there."""
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "params.yaml").write_text(PARAMS.read_text(encoding="utf-8"))
    workspace = tmp_path / "runs" / "profiles" / "smoke"
    (workspace / "gapo").mkdir(parents=True)
    (workspace / "gapo" / "__init__.py").write_text("")
    (workspace / "dvc.yaml").write_text("a copy\n")
    assert pipeline.use_profile("smoke", tmp_path / "params.yaml") == workspace
    assert not (workspace / "gapo").exists() and os.readlink(workspace / "dvc.yaml") == "../../../dvc.yaml"
    resolved = yaml.safe_load((workspace / "params.yaml").read_text())
    assert resolved["profile"] == "smoke" and resolved["repo"] == "../../../"
    assert profiles.resolve(None, workspace / "params.yaml") == profiles.resolve("smoke", PARAMS)


def test_gapo_train_reads_the_active_profile(tmp_path):  # noqa: ANN001
    """`gapo train` in a profile's workspace trains what that profile's stage trains, not the embedded defaults."""
    from gapo.train import parse_args

    text = PARAMS.read_text(encoding="utf-8")
    for profile, model, steps in [("embedded", "embedded", 120), ("smoke", "tiny-random", 2)]:
        params = tmp_path / f"{profile}.yaml"
        params.write_text(re.sub(r"(?m)^profile:.*$", f"profile: {profile}", text, count=1), encoding="utf-8")
        script, args = parse_args(["--params", str(params)])
        expected = profiles.stage_params("train_gapo", profile, params)["train"]
        assert (script.model, args.max_steps) == (expected["model"], expected["max_steps"])
        assert script.model == model and (profile != "smoke" or args.max_steps == steps)
