"""The migration protocol shared by every agent and the coordinator: where its nodes live, the
phases and their legal moves, the flag's JSON, the participants' records.

It sits on the store layer and knows nothing above it: the agent's participant and the
coordinator both speak it, and neither imports the other.
"""
