"""The fenced moves spelled once (``store/moves.py``) are checked against the transition
table when they are made."""

from __future__ import annotations

import pytest

from ledgerq import JobState
from ledgerq.core import errors
from ledgerq.store import moves

S = JobState


def test_a_move_the_transition_table_does_not_allow_fails_when_it_is_made() -> None:
    with pytest.raises(errors.InvalidTransition):
        moves.Move("revive", frozenset({S.RUNNING}), source=S.SUCCEEDED)
    assert moves.POSTPONE.targets == {S.SCHEDULED} and moves.PUT_BACK.targets == {S.QUEUED}
