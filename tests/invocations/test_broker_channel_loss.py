"""A task that finishes after the worker lost Redis acknowledges on a collected channel.

Found by tests/chaos under CPU load: Celery collects the broken connection, a task of the old
connection finishes, and its late ack asks the old channel for a client. kombu then raised
``AttributeError`` (not a connection error), which escaped ``ack_log_error`` and shut the worker
down instead of reconnecting. ``toolops.celery`` turns it into a Redis connection error, the class
Celery already logs and survives. A real kombu channel on the test Redis, collected as Celery does.
"""
import logging

import pytest
from kombu import Connection
from kombu.message import Message

from tests.conftest import require_redis
from toolops.celery import BrokerChannelClosed


@pytest.fixture
def collected_channel():
    connection = Connection(require_redis())
    channel = connection.channel()
    connection.collect()  # what Celery's consumer does on connection loss
    yield connection, channel
    channel.qos._delivered.clear()  # nothing left for kombu to restore at interpreter exit
    connection.release()


def test_an_ack_on_a_collected_channel_raises_a_broker_connection_error(collected_channel):
    connection, channel = collected_channel
    with pytest.raises(BrokerChannelClosed) as raised:
        channel.qos.ack("delivery-tag-of-a-finished-task")
    assert isinstance(raised.value, connection.connection_errors)


def test_celery_late_ack_path_logs_and_survives(collected_channel, caplog):
    connection, channel = collected_channel
    channel.qos._delivered["tag-1"] = True
    message = Message(body=b"{}", delivery_tag="tag-1", channel=channel, content_type="application/json")
    logger = logging.getLogger("tests.broker")
    with caplog.at_level(logging.CRITICAL, logger="tests.broker"):
        message.ack_log_error(logger, connection.connection_errors)  # Celery's Request.acknowledge
    assert "Couldn't ack" in caplog.text
