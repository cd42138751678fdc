"""The linearizability checker's own tests: hand-written histories that are linearizable and ones
that are not (a lost write, a stale read, a compare-and-set that succeeded on a stale version),
with concurrent operations and unknown outcomes; simulated histories of concurrent clients on true
registers, clean and with one fault; and a cross-check against a brute-force search of every order
on small random histories."""

from __future__ import annotations

import itertools
import random

import pytest

from metashift_lab.linearizability.checker import check
from metashift_lab.linearizability.simulate import LOST_WRITE, STALE_CAS, STALE_READ, simulate
from metashift_lab.sandbox.history import (
    CAS,
    CREATE,
    DELETE,
    NOT_APPLIED,
    OK,
    READ,
    REFUSED,
    UNKNOWN,
    UPDATE,
    WRITE,
    History,
    Operation,
)


def op(process: str, f: str, invoke: int, complete: int | None, *, key: str = "k", value: bytes | None = None,
       expected: int | None = None, status: str = OK, read: tuple[bytes, int] | None = None,
       version: int | None = None, error: str = "") -> Operation:  # fmt: skip
    """One operation as a client records it (times in ms, any unit will do)."""
    o = Operation(process, key, f, value, expected, invoke=invoke, complete=complete, status=status, error=error)
    if f == READ and status == OK:
        o.found = read is not None
        if read is not None:
            o.read, o.version = read
    elif status == OK:
        o.version = version
    return o


def create(p: str, t0: int, t1: int, value: bytes, **kw: object) -> Operation:
    return op(p, CREATE, t0, t1, value=value, version=0, **kw)  # type: ignore[arg-type]


def write(p: str, t0: int, t1: int | None, value: bytes, version: int | None, **kw: object) -> Operation:
    return op(p, WRITE, t0, t1, value=value, version=version, **kw)  # type: ignore[arg-type]


def cas(p: str, t0: int, t1: int | None, value: bytes, expected: int, version: int | None, **kw: object) -> Operation:
    return op(p, CAS, t0, t1, value=value, expected=expected, version=version, **kw)  # type: ignore[arg-type]


def read(p: str, t0: int, t1: int, got: tuple[bytes, int] | None, **kw: object) -> Operation:
    return op(p, READ, t0, t1, read=got, **kw)  # type: ignore[arg-type]


def verdict(*ops: Operation) -> bool:
    return check(list(ops)).linearizable


# ---- hand-written: linearizable ---------------------------------------------------------------


def test_a_sequential_history_is_linearizable() -> None:
    assert verdict(
        read("a", 0, 1, None),
        create("a", 2, 3, b"x"),
        read("b", 4, 5, (b"x", 0)),
        cas("b", 6, 7, b"y", expected=0, version=1),
        write("a", 8, 9, b"z", version=2),
        read("a", 10, 11, (b"z", 2)),
        op("b", DELETE, 12, 13, expected=2),
        read("a", 14, 15, None),
        write("b", 16, 17, b"again", version=0),  # a blind write creates, at version 0
    )


def test_a_read_concurrent_with_a_write_may_see_either_value() -> None:
    base = [create("a", 0, 1, b"old")]
    assert verdict(*base, write("a", 2, 10, b"new", version=1), read("b", 3, 9, (b"old", 0)))
    assert verdict(*base, write("a", 2, 10, b"new", version=1), read("b", 3, 9, (b"new", 1)))
    # two reads inside one write: the first new, then old is impossible (no going back)
    assert not verdict(*base, write("a", 2, 20, b"new", version=1), read("b", 3, 5, (b"new", 1)),
                       read("b", 6, 8, (b"old", 0)))  # fmt: skip


def test_concurrent_compare_and_sets_only_one_wins() -> None:
    base = [create("a", 0, 1, b"v0")]
    winner = cas("b", 2, 10, b"b", expected=0, version=1)
    loser = cas("c", 3, 9, b"c", expected=0, version=None, status=REFUSED, error="bad_version")
    assert verdict(*base, winner, loser, read("a", 11, 12, (b"b", 1)))
    both = cas("c", 3, 9, b"c", expected=0, version=1)
    assert not verdict(*base, winner, both)


def test_an_unknown_write_may_have_happened_later_or_never() -> None:
    base = [create("a", 0, 1, b"v0"), write("a", 2, None, b"maybe", version=None, status=UNKNOWN)]
    # seen long after it was invoked: it took effect late
    assert verdict(*base, read("b", 3, 4, (b"v0", 0)), read("b", 50, 51, (b"maybe", 1)))
    # never seen: it never happened (or happened after everything)
    assert verdict(*base, read("b", 3, 4, (b"v0", 0)), read("b", 50, 51, (b"v0", 0)))
    # the next write made version 2: the unknown one happened before it, unseen
    assert verdict(*base, write("b", 10, 11, b"next", version=2), read("b", 12, 13, (b"next", 2)))
    # ... but it cannot be seen before it was invoked
    assert not verdict(create("a", 0, 5, b"v0"), read("b", 6, 7, (b"maybe", 1)),
                       write("a", 8, None, b"maybe", version=None, status=UNKNOWN))  # fmt: skip


def test_a_write_that_was_not_applied_tells_nothing_and_must_not_show() -> None:
    base = [create("a", 0, 1, b"v0"), write("a", 2, 3, b"held", None, status=NOT_APPLIED, error="HeldForMigration")]
    assert verdict(*base, read("b", 4, 5, (b"v0", 0)))
    assert not verdict(*base, read("b", 4, 5, (b"held", 1)))


def test_refusals_are_observations() -> None:
    base = [create("a", 0, 1, b"v0")]
    refused_cas = cas("b", 2, 3, b"x", expected=0, version=None, status=REFUSED, error="bad_version")
    assert not verdict(*base, refused_cas)  # nothing changed the version: the CAS had to win
    assert verdict(*base, write("c", 1, 4, b"w", version=1), refused_cas)  # unless a concurrent write came first
    assert not verdict(*base, op("b", CREATE, 2, 3, value=b"y", status=REFUSED, error="exists"),
                       op("b", DELETE, 4, 5), op("b", CREATE, 6, 7, value=b"z", status=REFUSED, error="exists"))
    assert verdict(op("b", UPDATE, 0, 1, value=b"y", status=REFUSED, error="not_found"), read("b", 2, 3, None))


def test_delete_and_create_again_restart_the_version() -> None:
    assert verdict(
        create("a", 0, 1, b"one"), write("a", 2, 3, b"two", version=1), op("a", DELETE, 4, 5, expected=1),
        create("b", 6, 7, b"three"), cas("a", 8, 9, b"four", expected=0, version=1), read("b", 10, 11, (b"four", 1)),
    )  # fmt: skip


def test_keys_are_judged_apart() -> None:
    result = check([
        create("a", 0, 1, b"x", key="k1"), read("b", 2, 3, (b"x", 0), key="k1"),
        create("a", 0, 1, b"y", key="k2"), read("b", 2, 3, None, key="k2"),
    ])  # fmt: skip
    assert not result.linearizable
    assert [k.key for k in result.failures] == ["k2"] and len(result.keys) == 2


# ---- hand-written: the three faults the checker exists for --------------------------------------


def test_a_lost_write_is_caught() -> None:
    """A write acknowledged, then a read after it that never sees it (and nothing else wrote)."""
    history = [
        create("a", 0, 1, b"v0"),
        write("a", 2, 3, b"acked", version=1),
        read("b", 10, 11, (b"v0", 0)),
    ]
    result = check(history)
    assert not result.linearizable
    window = result.failures[0].window
    assert {o.f for o in window} == {WRITE, READ}, result.describe()


def test_a_stale_read_is_caught_with_concurrent_and_unknown_operations_around() -> None:
    history = [
        create("a", 0, 1, b"v0"),
        write("a", 2, 5, b"v1", version=1),
        write("c", 3, None, b"lost-in-flight", version=None, status=UNKNOWN),  # may explain nothing
        read("d", 4, 30, (b"v1", 1)),  # concurrent with what follows: no constraint from it
        write("a", 6, 9, b"v2", version=2),
        read("b", 12, 13, (b"v1", 1)),  # v2 was acknowledged before this read began
    ]
    assert not verdict(*history)
    assert verdict(*history[:-1], read("b", 12, 13, (b"v2", 2)))


def test_a_compare_and_set_that_succeeded_on_a_stale_version_is_caught() -> None:
    history = [
        create("a", 0, 1, b"v0"),
        cas("a", 2, 3, b"v1", expected=0, version=1),
        cas("b", 4, 5, b"stale", expected=0, version=1),  # version 0 was gone before it began
    ]
    assert not verdict(*history)
    # the same, concurrent with the first: one of the two would have been refused
    assert not verdict(history[0], cas("a", 2, 6, b"v1", expected=0, version=1),
                       cas("b", 3, 5, b"stale", expected=0, version=1))  # fmt: skip


def test_the_window_is_small_holds_the_fault_and_is_printed() -> None:
    history = simulate(1, 400, clients=3, unknown=0.0, fault=STALE_READ)
    faulty = next(o for o in history if o.error.startswith("simulated fault"))
    result = check(history)
    assert not result.linearizable
    window = result.failures[0].window
    assert faulty in window and 2 <= len(window) <= 12, result.describe()
    text = result.describe()
    assert "NOT linearizable" in text and "smallest non-linearizable window" in text
    assert f"-> {faulty.read!r} version {faulty.version}" in text


# ---- simulated concurrent clients ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_simulated_histories_are_linearizable(seed: int) -> None:
    history = simulate(seed, 1500, keys=3, clients=5, unknown=0.01)
    assert any(o.status == UNKNOWN for o in history)
    result = check(history)
    assert result.linearizable, result.describe()
    assert result.operations == len(history)


@pytest.mark.parametrize(("fault", "seed"), [(LOST_WRITE, 2), (LOST_WRITE, 3), (STALE_READ, 0), (STALE_READ, 1),
                                             (STALE_CAS, 0), (STALE_CAS, 1)])  # fmt: skip
def test_simulated_histories_with_one_fault_are_not(fault: str, seed: int) -> None:
    history = simulate(seed, 300, keys=1, clients=4, unknown=0.01, fault=fault)
    faulty = next(o for o in history if o.error.startswith("simulated fault"))
    result = check(history)
    assert not result.linearizable, fault
    window = result.failures[0].window
    assert faulty in window and len(window) <= 40, result.describe()


def test_a_history_saved_and_loaded_is_judged_the_same(tmp_path: object) -> None:
    from pathlib import Path

    history = History(simulate(5, 300, keys=2, clients=3, unknown=0.05, fault=STALE_READ))
    path = Path(str(tmp_path)) / "history.jsonl"
    history.save(path)
    again = History.load(path)
    assert [o.to_json() for o in again] == [o.to_json() for o in history]
    assert check(again.ops).linearizable is check(history.ops).linearizable is False


# ---- cross-check against every order ---------------------------------------------------------------


def _legal(state: tuple[bytes, int] | None, o: Operation) -> tuple[bool, tuple[bytes, int] | None]:
    """The sequential specification, written plainly: may ``o`` answer what it answered in
    ``state`` (an unknown outcome: may it apply), and the state after."""
    present = state is not None
    v = state[1] if state is not None else None
    if o.status == REFUSED:
        fits = {"not_found": not present, "exists": present,
                "bad_version": not present or v != o.expected}.get(o.error, False)  # fmt: skip
        return fits, state
    known = o.status == OK
    if o.f == READ:
        seen = (o.read or b"", o.version) if o.found else None
        return seen == state, state
    if o.f == DELETE:
        ok = present and (o.expected is None or v == o.expected)
        return ok, None
    if o.f == CREATE:
        ok = not present
        new = 0
    elif o.f == CAS:
        ok = present and v == o.expected
        new = (v or 0) + 1
    elif o.f == UPDATE:
        ok = present
        new = (v or 0) + 1
    else:
        ok = True
        new = 0 if not present else (v or 0) + 1
    if known and o.version is not None and o.version != new:
        ok = False
    return ok, (o.value or b"", new)


def _brute(ops: list[Operation]) -> bool:
    ops = [o for o in ops if o.status != NOT_APPLIED and not (o.f == READ and o.status != OK)]
    known = [o for o in ops if o.status in (OK, REFUSED)]
    unknown = [o for o in ops if o.status == UNKNOWN]
    for k in range(len(unknown) + 1):
        for chosen in itertools.combinations(unknown, k):
            for order in itertools.permutations(known + list(chosen)):
                # real time: what answered before another began must come first
                if any(b.complete is not None and b.status != UNKNOWN and b.complete < a.invoke
                       for i, a in enumerate(order) for b in order[i + 1:]):  # fmt: skip
                    continue
                state: tuple[bytes, int] | None = None
                for o in order:
                    ok, state = _legal(state, o)
                    if not ok:
                        break
                else:
                    return True
    return False


def _perturb(rng: random.Random, history: list[Operation]) -> None:
    o = rng.choice(history)
    choice = rng.randrange(4)
    if choice == 0 and o.version is not None:
        o.version += rng.choice((-1, 1))
    elif choice == 1 and o.f == READ and o.status == OK:
        other = rng.choice([p for p in history if p.value is not None] or [o])
        o.found, o.read, o.version = True, other.value, rng.randrange(3)
    elif choice == 2 and o.status == REFUSED:
        o.status, o.error, o.version = OK, "", rng.randrange(3)
    elif choice == 3:
        o.status = UNKNOWN if o.f != READ else o.status
        o.complete = None if o.status == UNKNOWN else o.complete


def test_the_checker_agrees_with_a_brute_force_search_on_small_histories() -> None:
    rng = random.Random(17)
    verdicts = {True: 0, False: 0}
    for seed in range(600):
        history = simulate(seed, rng.randint(3, 6), keys=1, clients=3, unknown=0.25)
        if seed % 4:
            _perturb(rng, history)
        expected = _brute(history)
        got = check(history).linearizable
        assert got is expected, "\n".join(o.describe() for o in sorted(history, key=lambda o: o.invoke))
        verdicts[expected] += 1
    assert verdicts[True] > 150 and verdicts[False] > 50, verdicts


def test_every_window_of_a_linearizable_history_is_linearizable() -> None:
    """What makes the printed window a witness: cutting a linearizable history anywhere (the
    operations across the cut unknown, the register in any state at the start) never makes it
    non-linearizable."""
    from metashift_lab.linearizability.checker import ANY, _prepare, _relevant, _search

    rng = random.Random(3)
    for seed in range(10):
        ops = sorted(_relevant(simulate(seed, 300, clients=4, unknown=0.03)), key=lambda o: o.invoke)
        for _ in range(10):
            a, b = sorted(rng.sample(range(len(ops)), 2))
            t0, t1 = ops[a].invoke, ops[b].complete or ops[b].invoke
            assert _search(_prepare(ops, t0, t1), ANY, 10**7) is True, (seed, t0, t1)
