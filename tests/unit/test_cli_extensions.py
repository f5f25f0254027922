"""The CLI imports only the extension a command belongs to (``EXTENSION_OF``): the map must say what each
extension really registers, or a command would be missing when it runs alone."""

from __future__ import annotations

import argparse
import subprocess
import sys

from trainyard import cli


def test_every_extension_command_is_mapped_to_the_module_that_registers_it() -> None:
    cli._load_extensions()
    registered: dict[str, str] = {}
    for register in cli.EXTRA_COMMANDS:
        subparsers = argparse.ArgumentParser().add_subparsers()
        register(subparsers)
        registered.update(dict.fromkeys(subparsers.choices, register.__module__))
    assert registered == cli.EXTENSION_OF
    assert set(registered.values()) <= set(cli.EXTENSIONS)
    assert not set(registered) & set(cli.COMMANDS)


def test_an_extension_command_runs_in_a_fresh_process_with_only_its_module_loaded() -> None:
    code = ("import sys; from trainyard.cli import main; code = main(['policy-config', 'local']); "
            "print(sorted(m for m in sys.modules if m.startswith('trainyard.') and m.endswith('cli')), file=sys.stderr); "
            "raise SystemExit(code)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "trainyard-policy" in result.stdout or result.stdout.strip(), result.stdout
    loaded = result.stderr.strip().splitlines()[-1]
    assert "trainyard.policy.cli" in loaded and "trainyard.rehearsal.cli" not in loaded, loaded
