"""A wrong setting fails at construction, naming it."""

from __future__ import annotations

from typing import Any

import pytest

from outbox_consumer import ConfigError, Consumer, ConsumerConfig


def config(**changes: Any) -> ConsumerConfig:
    settings: dict[str, Any] = {
        "redis_url": "redis://127.0.0.1:6379",
        "topics": "order.created",
        "group": "billing",
    }
    settings.update(changes)
    return ConsumerConfig(**settings)


def test_defaults_are_valid_and_keys_follow_the_prefix() -> None:
    c = config()
    assert c.stream_keys() == ["outbox:order.created"]
    assert c.dead_key("order.created") == "outbox:order.created:dead"
    assert c.dead_key_of_stream("outbox:order.created:7") == "outbox:order.created:dead"
    assert c.dead_key_of_stream("outbox:order.created") == "outbox:order.created:dead"
    assert config(topics=["a", "b"], stream_prefix="p:").stream_keys() == ["p:a", "p:b"]


@pytest.mark.parametrize(
    ("changes", "setting"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"max_deliveries": 0}, "max_deliveries"),
        ({"concurrency": 0}, "concurrency"),
        ({"redis_url": "http://x"}, "redis_url"),
        ({"consumer": "a b"}, "consumer"),
        ({"group": ""}, "group"),
        ({"topics": []}, "topics"),
        ({"topics": ["a", "b", "a"]}, "topics"),
        ({"topics": "has space"}, "topics"),
        ({"block": 0}, "block"),
        ({"claim_idle": 0.05}, "claim_idle"),
        ({"retry_base": 2.0, "retry_max": 1.0}, "retry_base"),
    ],
)
def test_bad_settings_are_named(changes: dict[str, Any], setting: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config(**changes)
    assert raised.value.setting == setting
    assert f"`{setting}`" in str(raised.value)


def test_the_consumer_checks_its_config_again() -> None:
    c = config()
    c.batch_size = 0
    with pytest.raises(ConfigError) as raised:
        Consumer(c)
    assert raised.value.setting == "batch_size"
