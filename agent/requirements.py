"""What a coordinator candidate needs installed beside the agent: PySpark and a Java runtime.

A node whose agent never coordinates (``coordinator.enabled = false``) needs neither: PySpark is the
``metashift[coordinator]`` extra, not a dependency of the sidecar itself."""

from __future__ import annotations

import importlib.util
import os
import shutil


def missing_for_coordinator() -> str | None:
    """Why this node cannot run the coordinator's Spark copy, or None when it can."""
    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):  # ValueError: blocked by a None in sys.modules (python's own way)
        spec = None
    if spec is None:
        return (
            "PySpark is not installed: install metashift[coordinator] on coordinator candidates, "
            "or set coordinator.enabled = false on this node"
        )
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return f"JAVA_HOME={java_home} holds no bin/java: Spark's copy needs a Java runtime (17 or newer)"
    if not java_home and shutil.which("java") is None:
        return (
            "no Java runtime (java on PATH or JAVA_HOME): Spark's copy needs one (17 or newer) on coordinator "
            "candidates, or set coordinator.enabled = false on this node"
        )
    return None
