"""Bad input gets a specific `InvalidInput` naming the field and what it accepts."""

from __future__ import annotations

import pytest

from seqexport_dagster.contract.schema import parse_datasets
from seqexport_dagster.contract.window import frequency_ms
from seqexport_dagster.destination.config import DestinationConfig, validate_bucket, validate_config, validate_prefix
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import InvalidInput

POLICY = OperatorPolicy()


def s3(**overrides: object) -> DestinationConfig:
    values: dict[str, object] = {
        "provider": "s3",
        "bucket": "acme-exports",
        "prefix": "sequenzy",
        "region": "us-east-1",
        "access_key_id": "AKIAEXAMPLE",
        "secret_access_key": "s3cr3t-value",
    }
    values.update(overrides)
    return DestinationConfig(**values)  # type: ignore[arg-type]


def test_unknown_dataset() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_datasets(["email_events", "clicks"])
    assert err.value.field == "dataset"
    assert "'clicks'" in err.value.problem
    assert "email_events, sms_events, custom_events, subscribers" in err.value.problem
    with pytest.raises(InvalidInput) as err:
        parse_datasets("")
    assert err.value.field == "datasets" and "email_events" in err.value.problem


def test_datasets_keep_the_contract_order() -> None:
    assert parse_datasets("subscribers, email_events") == ("email_events", "subscribers")
    # A name given twice is a typo to point out, not to echo back (issue 17).
    with pytest.raises(InvalidInput, match="email_events named more than once"):
        parse_datasets("subscribers, email_events,email_events")


@pytest.mark.parametrize("frequency", ["5m", "1d", "", "60m", "1H"])
def test_bad_frequency(frequency: str) -> None:
    with pytest.raises(InvalidInput) as err:
        frequency_ms(frequency)
    assert err.value.field == "frequency"
    assert str(err.value) == f"frequency: {frequency!r} is not one of 15m, 1h, 6h, 24h"


@pytest.mark.parametrize(
    ("bucket", "why"),
    [
        ("Acme-Exports", "lowercase letters"),
        ("ab", "3-63 characters"),
        ("a" * 64, "3-63 characters"),
        ("acme_exports", "lowercase letters"),
        ("-acme", "starting and ending"),
        ("acme..exports", "no '..'"),
        ("acme.-exports", "no '..', '.-' or '-.'"),
        ("192.168.1.10", "IP address"),
        ("xn--acme", "reserved prefix"),
        ("acme-s3alias", "reserved prefix or suffix"),
    ],
)
def test_bad_bucket(bucket: str, why: str) -> None:
    with pytest.raises(InvalidInput) as err:
        validate_bucket(bucket)
    assert err.value.field == "bucket"
    assert repr(bucket) in err.value.problem and why in err.value.problem
    with pytest.raises(InvalidInput) as err:
        validate_config(s3(bucket=bucket), POLICY)
    assert err.value.field == "bucket"


@pytest.mark.parametrize("bucket", ["acme-exports", "abc", "a.b-c.d", "a" * 63])
def test_good_bucket(bucket: str) -> None:
    assert validate_bucket(bucket) == bucket


@pytest.mark.parametrize(
    ("prefix", "why"),
    [
        ("/sequenzy", "may not start with '/'"),
        ("/", "may not start with '/'"),
        ("sequenzy/../other", "'.' or '..' segments"),
        ("..", "'.' or '..' segments"),
        ("../sequenzy", "'.' or '..' segments"),
        ("./sequenzy", "'.' or '..' segments"),
        ("a//b", "empty segments"),
        ("a/b\\c", "letters, digits"),
        ("a/" + "b" * 600, "at most 512 characters"),
    ],
)
def test_bad_prefix(prefix: str, why: str) -> None:
    with pytest.raises(InvalidInput) as err:
        validate_prefix(prefix)
    assert err.value.field == "prefix"
    assert why in err.value.problem
    with pytest.raises(InvalidInput) as err:
        validate_config(s3(prefix=prefix), POLICY)
    assert err.value.field == "prefix"


@pytest.mark.parametrize(
    ("prefix", "normalized"), [("", ""), ("sequenzy", "sequenzy"), ("sequenzy/", "sequenzy"), ("a/b..c", "a/b..c")]
)
def test_good_prefix(prefix: str, normalized: str) -> None:
    assert validate_prefix(prefix) == normalized


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"provider": "ftp"}, "provider"),
        ({"access_key_id": ""}, "access_key_id"),
        ({"secret_access_key": None}, "secret_access_key"),
        ({"region": None}, "region"),
        ({"region": "Europe"}, "region"),
        ({"provider": "gcs", "endpoint": "https://example.com"}, "endpoint"),
    ],
)
def test_config_names_the_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        validate_config(s3(**overrides), POLICY)
    assert err.value.field == field
    assert "s3cr3t-value" not in str(err.value)


def test_valid_config_is_normalized() -> None:
    checked = validate_config(s3(prefix="sequenzy/"), POLICY)
    assert checked.prefix == "sequenzy" and checked.region == "us-east-1" and checked.endpoint is None
    gcs = validate_config(s3(provider="gcs", region=None), POLICY)
    assert gcs.endpoint == "https://storage.googleapis.com" and gcs.region == "auto"
