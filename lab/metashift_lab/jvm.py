"""The JVM flags the lab's Java servers (ZooKeeper, Pulsar, BookKeeper) start with."""

from __future__ import annotations

#: Two cores: the client compiler only and the serial collector. A JVM starts on a fraction of
#: the CPU the defaults take, which matters with five JVMs starting at once, and a ZooKeeper
#: under a test's load spends half the CPU (C2's compiler threads were most of it: measured
#: 5.0 core-s against 2.8 for 5,000 writes).
LEAN_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData", "-Xss512k")
