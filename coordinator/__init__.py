"""The coordinator: leader election among agents, the phase machine that drives a migration,
the copy it launches, and the control API behind ``metashift migrate``."""
