"""The Redis URL forms LEDGERQ_REDIS_URL accepts (core/redis_url.py): a Sentinel URL's
sentinels, master name, db and two sets of credentials; every malformed one refused with a
message that names the problem and never a password; Redis Cluster refused with its reason."""

from __future__ import annotations

import pytest

from ledgerq.config.settings import load_settings
from ledgerq.core import errors
from ledgerq.core.redis_url import (
    CLUSTER_REFUSAL,
    SentinelTarget,
    check_redis_url,
    parse_sentinel_url,
)
from ledgerq.transport.redis import connect

SECRET = "S3cret-pw"


def test_a_full_sentinel_url() -> None:
    url = (
        f"redis+sentinel://app:{SECRET}@10.0.0.1:26379,sentinel-2:26380,[::1]/jobs-master/3"
        f"?sentinel_password=sp%40ss&sentinel_username=watcher"
    )
    assert parse_sentinel_url(url) == SentinelTarget(
        sentinels=(("10.0.0.1", 26379), ("sentinel-2", 26380), ("::1", 26379)),
        service_name="jobs-master",
        db=3,
        username="app",
        password=SECRET,
        sentinel_username="watcher",
        sentinel_password="sp@ss",
    )
    assert check_redis_url(url) == url


def test_the_short_forms() -> None:
    target = parse_sentinel_url("redis+sentinel://h1/mymaster/")
    assert target.sentinels == (("h1", 26379),) and target.db == 0
    assert target.password is None and target.sentinel_password is None
    only_password = parse_sentinel_url(f"REDIS+SENTINEL://:{SECRET}@h1:1,h2:2/m")
    assert only_password.username is None and only_password.password == SECRET
    assert only_password.sentinels == (("h1", 1), ("h2", 2))


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+sentinel://h1", "names no Sentinel service"),
        ("redis+sentinel://h1/", "names no Sentinel service"),
        ("redis+sentinel:///mymaster", "empty sentinel address"),
        ("redis+sentinel://h1,,h2/mymaster", "empty sentinel address"),
        ("redis+sentinel://h1:port/mymaster", "bad sentinel address"),
        ("redis+sentinel://h1:0/mymaster", "port out of range"),
        ("redis+sentinel://h1:70000/mymaster", "port out of range"),
        ("redis+sentinel://h1/mymaster/db1", "the db must be a number"),
        ("redis+sentinel://h1/mymaster/1/2", "must be /<master name>[/<db>]"),
        ("redis+sentinel://h1/my%20master", "is not a Sentinel master name"),
        ("redis+sentinel://h1/mymaster?ssl=true", "unknown option(s) ssl"),
        ("redis+sentinel://h1/m?sentinel_password=a&sentinel_password=b", "repeats"),
        ("redis+sentinel://h1/m#frag", "fragment"),
        ("http://h1/0", "must start with redis://"),
        ("redis://", "names no host"),
    ],
)
def test_a_malformed_url_names_its_problem(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match="redis_url") as raised:
        check_redis_url(url)
    assert problem in str(raised.value)


def test_no_password_is_echoed() -> None:
    for url in (
        f"redis+sentinel://:{SECRET}@h1,/m",
        f"redis+sentinel://h1/m?sentinel_pasword={SECRET}",  # misspelt, still a secret
        f"redis+sentinel://u:{SECRET}@h1/m/x?sentinel_password={SECRET}",
    ):
        with pytest.raises(ValueError, match="redis_url") as raised:
            check_redis_url(url)
        assert SECRET not in str(raised.value)


@pytest.mark.parametrize("url", ["redis+cluster://h1:7000", "rediss+cluster://h1:7000/0"])
def test_redis_cluster_is_refused_with_the_reason(url: str) -> None:
    with pytest.raises(ValueError, match="Redis Cluster is not supported") as raised:
        check_redis_url(url)
    assert "BZMPOP" in str(raised.value) and "slot" in str(raised.value)
    with pytest.raises(errors.ConfigError, match="Redis Cluster is not supported"):
        load_settings(redis_url=url)
    with pytest.raises(errors.ConfigError, match="Redis Cluster"):
        connect(url)
    assert "redis+sentinel://" in CLUSTER_REFUSAL


def test_settings_accept_a_sentinel_url_and_show_it_masked() -> None:
    url = f"redis+sentinel://:{SECRET}@h1,h2/mymaster/2?sentinel_password={SECRET}"
    settings = load_settings(redis_url=url)
    shown = settings.masked()["redis_url"]
    assert SECRET not in shown
    assert shown.startswith("redis+sentinel://:***@h1,h2/mymaster/2")
    with pytest.raises(errors.ConfigError, match="names no Sentinel service"):
        load_settings(redis_url="redis+sentinel://h1")


def test_connect_builds_a_client_of_the_named_master_without_a_socket() -> None:
    client = connect(f"redis+sentinel://:{SECRET}@127.0.0.1:1,127.0.0.1:2/mymaster/5")
    pool = client.connection_pool
    assert pool.service_name == "mymaster"  # type: ignore[attr-defined]
    assert pool.connection_kwargs["db"] == 5 and pool.connection_kwargs["password"] == SECRET
    sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    ports = [s.connection_pool.connection_kwargs["port"] for s in sentinels]
    assert ports == [1, 2]
    client.close()
    with pytest.raises(errors.ConfigError, match="empty sentinel address"):
        connect("redis+sentinel://h1,/m")
