"""The bank-rule engine (models/dram_rules.py): the compiled kernel == its plain-Python
reference (models/reference.py) on random tables and streams; the HBM-PIM and AttAcc tables
give the cycles their handwritten kernels gave (pinned digests); hand-timed rules; refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from pimphony.models.dram_rules import (
    BankRuleError,
    BankRules,
    Commands,
    Constraint,
    Level,
    Match,
    Since,
    issue,
    node_table,
)
from pimphony.models.reference import issue_reference

from tests.bank_rule_streams import CASES, digest

#: bank_rule_streams.digest of each case on main 078a267, before the engine: the
#: handwritten numba kernels of models/hbm_pim.py and models/attacc.py.
PINNED = {
    ("hbm-pim", 0): "c6e0f6f7bf1440acc47c61ad654fa9484f70beb0221aa16355f33c63b1440e97",
    ("hbm-pim", 1): "f6d767837f7f3a94f5e80f54b848322272b7103f47c569f442c90b5cd5354413",
    ("hbm-pim", 2): "91d42e6cdc539d5249fbdd393eb6e58167f8a9ab2e767cfaaca16b93c0611b11",
    ("hbm-pim-hbm3", 0): "c9b2727342c3a652a02462756edc769149e9dacf566577918df10cd085c28285",
    ("hbm-pim-hbm3", 1): "e41bf277608e072d8a31fa409080bbc9cf6a8e469ea5b28390e144d8359b402e",
    ("hbm-pim-hbm3", 2): "3f686c63e3cf46c00b3fd2909e5335654a8f243979f4866c849a1b2d44f031e8",
    ("lpddr5x-pim", 0): "6f6aa1625a7a1792977a33e0c7fe1fac3e24ab9df73f35ea4088c1f31125ae88",
    ("lpddr5x-pim", 1): "d891d30e5fa7aad2274f92d3c78901c08d2c5446f7c5568bb8dda0a942aa5526",
    ("lpddr5x-pim", 2): "84731615637202200ff98f4457bf354d115433fa4dac88ca39c5fc64d5180f2c",
    ("attacc", 0): "785ab2257bf997bde2dd9ca17dc708f21a6356d35b84928354ba9cd4fc560906",
    ("attacc", 1): "3db9fc77cded0878de0229dc2fe784cb43082963da432c062df66ec4f5098556",
    ("attacc", 2): "822cad768593b36a6191b3a8a13b83b06933203db76d37f6432e758ac827e47a",
}


@pytest.mark.parametrize("case", CASES, ids=[f"{n}-{v}" for n, v in CASES])
def test_tables_give_the_handwritten_kernels_cycles(case) -> None:
    """Seeded random streams (mode changes, every op, preset and random timing) time as they
    did before the engine, issue cycle for issue cycle."""
    assert digest(*case) == PINNED[case]


# ----------------------------------------------------------------------------- kernel == reference


@st.composite
def _table(draw) -> BankRules:
    """Any table: 1-6 ops, 0-10 constraints of every level, match, since and window."""
    ops = draw(st.integers(1, 6))
    some = st.frozensets(st.integers(0, ops - 1), min_size=1)
    constraints = []
    for _ in range(draw(st.integers(0, 10))):
        window = draw(st.sampled_from([1, 1, 2, 4]))
        match = Match.EACH if window > 1 else draw(st.sampled_from(Match))
        since = Since.ISSUE if window > 1 else draw(st.sampled_from(Since))
        level, latency = draw(st.sampled_from(Level)), draw(st.integers(-5, 40))
        constraints.append(Constraint(draw(some), draw(some), level, latency, window, match, since))
    completion = tuple(draw(st.lists(st.integers(0, 30), min_size=ops, max_size=ops)))
    wide = draw(st.frozensets(st.integers(0, ops - 1)))
    return BankRules(ops, tuple(constraints), completion, wide)


@st.composite
def _case(draw):
    rules = draw(_table())
    banks = draw(st.integers(1, 12))
    level = arrays(np.int64, banks, elements=st.integers(0, banks - 1))
    nodes = node_table(banks, draw(level), draw(level), draw(level))
    n = draw(st.integers(0, 200))
    op = draw(arrays(np.int64, n, elements=st.integers(0, rules.ops - 1)))
    bank = draw(arrays(np.int64, n, elements=st.integers(0, banks - 1)))
    wide = draw(st.none() | arrays(np.bool_, n))
    extra = draw(st.none() | arrays(np.int64, n, elements=st.integers(0, 20)))
    return rules, nodes, Commands.of(op, bank, wide, extra)


@settings(max_examples=300, deadline=None)
@given(_case())
def test_kernel_equals_reference_on_random_tables(case) -> None:
    """Any table, hierarchy and stream (all-bank commands, completions, windows, newest-only
    rules): the same issue cycles and end."""
    fast, ref = issue(*case), issue_reference(*case)
    np.testing.assert_array_equal(fast[0], ref[0])
    assert fast[1] == ref[1]


# ----------------------------------------------------------------------------- rules by hand

A, B = 0, 1
_NODES = node_table(4, np.array([0, 0, 1, 1]), np.zeros(4, np.int64), np.zeros(4, np.int64))


def _both(rules: BankRules, op, bank, wide=None, extra=None) -> list[int]:
    args = (rules, _NODES, Commands.of(np.array(op), np.array(bank), wide, extra))
    fast, ref = issue(*args), issue_reference(*args)
    assert fast[0].tolist() == ref[0].tolist() and fast[1] == ref[1]
    return fast[0].tolist()


def test_each_newest_and_window_by_hand() -> None:
    """EACH waits for the same node only; NEWEST_SAME / _OTHER look at the channel's newest
    prerequisite only; a window waits for the w-th newest."""
    each = BankRules(1, (Constraint(frozenset({A}), frozenset({A}), Level.BANK_GROUP, 10),),
                     (0,))  # fmt: skip
    assert _both(each, [A, A, A], [0, 2, 1]) == [0, 1, 10]
    newest = BankRules(
        1,
        (Constraint(frozenset({A}), frozenset({A}), Level.BANK_GROUP, 10, match=Match.NEWEST_SAME),
         Constraint(frozenset({A}), frozenset({A}), Level.BANK_GROUP, 3,
                    match=Match.NEWEST_OTHER)),
        (0,),
    )  # fmt: skip
    # bank 1 follows bank 2 (other group: 3), not bank 0 (its own group, but not the newest)
    assert _both(newest, [A, A, A, A], [0, 2, 1, 0]) == [0, 3, 6, 16]
    faw = BankRules(1, (Constraint(frozenset({A}), frozenset({A}), Level.CHANNEL, 10, 2),), (0,))
    assert _both(faw, [A, A, A, A], [0, 1, 2, 3]) == [0, 1, 10, 11]


def test_all_bank_commands_and_completion_by_hand() -> None:
    """An all-bank command waits for every node and counts in every node; for a newest-only
    rule it is in every node, and a later command is in none of its; Since.DONE counts from
    completion (the op's plus the command's extra)."""
    per_bank = BankRules(2, (Constraint(frozenset({A, B}), frozenset({A, B}), Level.BANK, 10),),
                         (0, 0), wide=frozenset({B}))  # fmt: skip
    assert _both(per_bank, [A, B, A], [3, 0, 1]) == [0, 10, 20]
    newest = BankRules(1, (Constraint(frozenset({A}), frozenset({A}), Level.BANK_GROUP, 10,
                                      match=Match.NEWEST_SAME),), (0,))  # fmt: skip
    wide = np.array([False, True, False])
    assert _both(newest, [A, A, A], [2, 0, 0], wide) == [0, 10, 11]
    done = BankRules(2, (Constraint(frozenset({A}), frozenset({B}), Level.CHANNEL, 1,
                                    since=Since.DONE),), (5, 0))  # fmt: skip
    assert _both(done, [A, B], [0, 0], extra=np.array([7, 0])) == [0, 13]


def test_bad_tables_are_refused() -> None:
    c = Constraint(frozenset({0}), frozenset({2}), Level.BANK, 1)
    with pytest.raises(BankRuleError, match=r"prev and next must be op codes 0 to 1"):
        BankRules(2, (c,), (0, 0))
    with pytest.raises(BankRuleError, match=r"completion has 1 entries for 2 ops"):
        BankRules(2, (), (0,))
    ring = Constraint(frozenset({0}), frozenset({0}), Level.BANK, 1, 4, Match.NEWEST_SAME)
    with pytest.raises(BankRuleError, match=r"a window counts issued commands of each node"):
        BankRules(1, (ring,), (0,))
    with pytest.raises(BankRuleError, match=r"wide ops \[3\] are not op codes"):
        BankRules(1, (), (0,), wide=frozenset({3}))
