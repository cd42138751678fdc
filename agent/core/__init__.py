"""The agent's core, whatever front a client comes through: the write gate and its states, the
router (source or target), client sessions and their ephemerals, and the agent's part in a
migration (registration, heartbeat, the participant, its home store, the check's dry opens, the
floors of retired counters)."""
