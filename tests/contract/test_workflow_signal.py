"""The WorkflowSignal contract, over every implementation (``WORKFLOW_SIGNALS``): signals of
new workflow events reach subscribers of other processes, from a thread of the signal's own,
until ``close``; a failed send raises ``TransportError``."""

from __future__ import annotations

import threading
import time

import pytest

from ledgerq.core import errors
from tests.contract.conftest import Inbox, Lane


def test_a_signal_carries_its_workflow_ids_to_a_subscriber(signal_lane: Lane) -> None:
    inbox = Inbox()
    signal_lane.subscriber.subscribe_workflow_events(inbox.handler)
    publisher = signal_lane.publisher
    inbox.deliver(lambda: publisher.publish_workflow_events(["wf-b", "wf-a"]), (["wf-a", "wf-b"],))
    inbox.deliver(lambda: publisher.publish_workflow_events(["wf-c"]), (["wf-c"],))
    assert threading.main_thread() not in inbox.threads


def test_a_closed_signal_calls_its_handler_no_more(signal_lane: Lane) -> None:
    inbox = Inbox()
    signal_lane.subscriber.subscribe_workflow_events(inbox.handler)
    publisher = signal_lane.publisher
    inbox.deliver(lambda: publisher.publish_workflow_events(["wf-a"]), (["wf-a"],))
    signal_lane.subscriber.close()
    time.sleep(1.0)  # a signal already being handed over may still arrive
    inbox.calls.clear()
    publisher.publish_workflow_events(["wf-b"])
    time.sleep(1.0)
    assert inbox.calls == []


def test_a_signal_that_cannot_be_sent_raises_transport_error(signal_lane: Lane) -> None:
    signal_lane.outage()
    with pytest.raises(errors.TransportError):
        signal_lane.publisher.publish_workflow_events(["wf-a"])
