"""The `gapo` command: `gapo train`, `gapo sample`, `gapo data` ... each a thin wrapper over one module's `cli`.

Errors a user can fix (bad flags, bad data, a model that cannot load offline) print one line, `gapo: error: ...`,
and exit with status 2; nothing half-written is left behind (each command writes atomically).
"""

from __future__ import annotations

import importlib
import sys

from gapo.models import ModelLoadError

#: subcommand -> (module, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("gapo.train", "train a LoRA adapter with GAPO on synthetic list prompts"),
    "sample": ("gapo.repro.sampling.cli", "sample N completions of one prompt to JSONL"),
    "data": ("gapo.repro.stages.generate", "write the synthetic list-selection dataset to JSONL"),
    "sft": ("gapo.repro.sft", "train the SFT baseline adapter (Appendix G) on the same list prompts"),
    "pipeline": ("gapo.repro.pipeline", "pipeline profiles: check, use, show"),
    "eval": ("gapo.repro.evaluate", "how collapsed is a model: lists, open questions, creativity"),
}

USER_ERRORS = (ValueError, KeyError, FileNotFoundError, FileExistsError)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        width = max(map(len, COMMANDS))
        lines = [f"  {name:<{width}}  {desc}" for name, (_, desc) in COMMANDS.items()]
        print("usage: gapo COMMAND [--help] ...\n\ncommands:\n" + "\n".join(lines))
        if argv and argv[0] not in ("-h", "--help"):
            print(f"gapo: error: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    module = importlib.import_module(COMMANDS[argv[0]][0])
    try:
        return int(module.cli(argv[1:]) or 0)
    except (*USER_ERRORS, ModelLoadError) as err:
        message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
        print(f"gapo: error: {message.splitlines()[0] if message else type(err).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gapo: interrupted (resume training with --resume)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
