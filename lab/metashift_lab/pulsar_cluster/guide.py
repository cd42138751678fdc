"""The ``metashift`` commands the Pulsar scenarios run where an operator follows the guide: as
``docs/operator-guide.md`` shows them in its ``guide-step`` blocks, with the cluster's URLs in
``$SOURCE`` and ``$TARGET``.

``tests/test_pulsar_adoption.py`` reads those blocks and hands them over in a JSON file named by
``METASHIFT_LAB_GUIDE`` (``{"step": ["migrate", "start", "--source", "$SOURCE", ...]}``), so that
the guide and the test cannot drift; each command run is then appended to ``<that file>.ran`` (a
JSON line: ``step``, ``argv``). Without the variable, the steps below are the guide's as written
when this module was: the sandbox runs the same commands either way.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

ENV = "METASHIFT_LAB_GUIDE"
STEPS: dict[str, list[str]] = {
    "adopt-check": ["migrate", "check", "--source", "$SOURCE", "--target", "$TARGET"],
    "migrate": ["migrate", "start", "--source", "$SOURCE", "--target", "$TARGET", "--wait"],
    "status": ["migrate", "status", "--source", "$SOURCE"],
    "after-switch-check": ["migrate", "status", "--source", "$TARGET"],
    "retire-check": ["migrate", "status", "--source", "$SOURCE", "--scan"],
}


@functools.cache
def _steps() -> dict[str, list[str]]:
    name = os.environ.get(ENV)
    if not name:
        return STEPS
    given = json.loads(Path(name).read_text())
    missing = sorted(set(STEPS) - set(given))
    if missing:
        raise ValueError(f"{name}: the guide has no step {', '.join(missing)}")
    return {step: [str(w) for w in words] for step, words in given.items()}


def command(step: str, *, source: str, target: str, json_output: bool = False) -> list[str]:
    """The arguments of ``metashift`` for ``step`` with the cluster's URLs (``--json`` added when
    the caller reads the output: the guide shows the text form)."""
    words = [source if w == "$SOURCE" else target if w == "$TARGET" else w for w in _steps()[step]]
    if json_output and "--json" not in words:
        words.append("--json")
    name = os.environ.get(ENV)
    if name:
        with open(f"{name}.ran", "a") as f:
            f.write(json.dumps({"step": step, "argv": words}) + "\n")
    return words
