"""The ControlChannel contract, over every implementation (``CONTROL_CHANNELS``): stop
wake-ups reach subscribers of other processes, from a thread of the channel's own, until the
channel is closed; a failed send raises ``TransportError``."""

from __future__ import annotations

import threading
import time

import pytest

from ledgerq.core import errors
from tests.contract.conftest import Inbox, Lane


def test_a_stop_reaches_a_subscriber_with_its_target_and_mode(control_lane: Lane) -> None:
    inbox = Inbox()
    control_lane.subscriber.subscribe_stops(inbox.handler)
    publisher = control_lane.publisher
    inbox.deliver(
        lambda: publisher.publish_stop(worker_id="w1", mode="graceful"), ("w1", "graceful")
    )
    inbox.deliver(
        lambda: publisher.publish_stop(worker_id=None, mode="immediate"), (None, "immediate")
    )
    assert set(inbox.calls) == {("w1", "graceful"), (None, "immediate")}
    assert threading.main_thread() not in inbox.threads


def test_a_closed_channel_calls_its_handler_no_more(control_lane: Lane) -> None:
    inbox = Inbox()
    control_lane.subscriber.subscribe_stops(inbox.handler)
    publisher = control_lane.publisher
    inbox.deliver(
        lambda: publisher.publish_stop(worker_id="w1", mode="graceful"), ("w1", "graceful")
    )
    control_lane.subscriber.close()
    time.sleep(1.0)  # a message already being handed over may still arrive
    inbox.calls.clear()
    publisher.publish_stop(worker_id="w2", mode="graceful")
    time.sleep(1.0)
    assert inbox.calls == []


def test_a_stop_that_cannot_be_sent_raises_transport_error(control_lane: Lane) -> None:
    control_lane.outage()
    with pytest.raises(errors.TransportError):
        control_lane.publisher.publish_stop(worker_id=None, mode="graceful")
