"""The kinds a configuration key's value can be (str, bool, count, float, paths): how each is read
from text (the environment, the command line) and checked, and the error a bad one raises."""

from __future__ import annotations

from typing import Any

from metashift.stores.errors import InvalidPath
from metashift.stores.paths import validate as validate_path


class ConfigError(ValueError):
    """A configuration the agent cannot run with; ``key`` names the culprit (``source.url``)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"config key {key}: {message}")


def from_text(key: str, kind: str, text: str) -> Any:
    """A value of ``kind`` from the environment's or the command line's text."""
    if kind == "bool":
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(key, f"must be true or false, not {text!r}")
    if kind == "count":
        try:
            return int(text)
        except ValueError:
            raise ConfigError(key, f"must be a whole number, not {text!r}") from None
    if kind == "float":
        try:
            return float(text)
        except ValueError:
            raise ConfigError(key, f"must be a number, not {text!r}") from None
    if kind == "paths":  # comma-separated in the environment and on the command line
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def typed(key: str, kind: str, value: Any) -> Any:
    """``key``'s ``value`` checked as a ``kind`` (a list of paths becomes a tuple, a number a float)."""
    if kind == "str" and not isinstance(value, str):
        raise ConfigError(key, f"must be a string, not {type(value).__name__}")
    if kind == "bool" and not isinstance(value, bool):
        raise ConfigError(key, f"must be true or false, not {value!r}")
    if kind == "count" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigError(key, f"must be a whole number of at least 0, not {value!r}")
    if kind == "paths":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(key, f"must be a list of paths, not {value!r}")
        for v in value:
            try:
                validate_path(v)
            except InvalidPath as e:
                raise ConfigError(key, str(e)) from None
        return tuple(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(key, f"must be a number, not {value!r}")
        if not value > 0:
            raise ConfigError(key, f"must be a positive number of seconds, not {value!r}")
        return float(value)
    return value
