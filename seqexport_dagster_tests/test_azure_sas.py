"""Azure Blob Storage's values (issue 45): what a customer gives is checked before anything is sent,
Azure's answers become messages a customer can act on, and a SAS signature shows nowhere. No server:
`test_azure` runs the same code against Azurite."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest

from seqexport_dagster.destination.azure import AzureDestination
from seqexport_dagster.destination.azure_errors import AzureAnswer, azure_answer, existed, retryable, translate_answer
from seqexport_dagster.destination.azure_sas import SAS_LOG_FILTER, parse_sas, redact_sas
from seqexport_dagster.destination.config import DestinationConfig, validate_config
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3_errors import Place
from seqexport_dagster.errors import (
    AccessDenied,
    BadCredentials,
    DestinationError,
    EndpointRefused,
    InvalidInput,
    NoSuchBucket,
    RetryableError,
)
from seqexport_dagster_tests.support import azurite as az

PREFIX = "sequenzy"


def test_azure_values_are_checked_before_anything_is_sent() -> None:
    """Container, account, endpoint, region, encryption and the SAS token's shape: each refusal names
    its field, and none repeats the token's signature."""
    customer = OperatorPolicy()
    sas = az.container_sas("acme-exports", "c")
    ok = DestinationConfig("azure", "acme-exports", PREFIX, access_key_id="acmedata", secret_access_key=sas)
    checked = validate_config(ok, customer)
    assert (checked.endpoint, checked.region) == ("https://acmedata.blob.core.windows.net", None)
    assert checked.describe() == "az://acme-exports/sequenzy via https://acmedata.blob.core.windows.net"
    gov = validate_config(
        DestinationConfig(**{**_fields(ok), "endpoint": "https://acmedata.blob.core.usgovcloudapi.net"}), customer
    )
    assert gov.endpoint == "https://acmedata.blob.core.usgovcloudapi.net"
    assert validate_config(DestinationConfig(**{**_fields(ok), "secret_access_key": "?" + sas}), customer)
    account_sas = "sv=2021-08-06&ss=b&srt=o&sp=c&se=2030-01-01T00:00:00Z&spr=https&sig=abc%2Bdef%3D"
    assert parse_sas(account_sas).permissions == "c"
    with_policy = parse_sas("sv=2021-08-06&si=sequenzy-export&sr=c&spr=https&sig=abc%3D")
    assert (with_policy.policy, with_policy.permissions, with_policy.expiry) == ("sequenzy-export", "", None)
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"bucket": "Acme_Exports"}, "bucket", "not a valid Azure container name"),
        ({"bucket": "acme--exports"}, "bucket", "no '--'"),
        ({"access_key_id": "Acme-Data"}, "access_key_id", "storage account name"),
        ({"access_key_id": None}, "access_key_id", "storage account's name"),
        ({"region": "westeurope"}, "region", "no region"),
        ({"sse": "AES256"}, "sse", "encryption scope"),
        ({"endpoint": "https://otheraccount.blob.core.windows.net"}, "endpoint", "the account's blob endpoint"),
        ({"endpoint": "http://acmedata.blob.core.windows.net"}, "endpoint", "only https://"),
        ({"endpoint": "https://127.0.0.1"}, "endpoint", "IP address literal"),
        ({"secret_access_key": None}, "secret_access_key", "SAS token"),
        ({"secret_access_key": az.container_sas("acme-exports", "r")}, "secret_access_key", "create (c)"),
        ({"secret_access_key": az.container_sas("acme-exports", "rl")}, "secret_access_key", "do not allow creating"),
        ({"secret_access_key": f"https://acmedata.blob.core.windows.net/acme-exports?{sas}"}, "secret_access_key", "not the SAS URL"),
        ({"secret_access_key": sas.replace("sr=c", "sr=b")}, "secret_access_key", "one blob"),
        ({"secret_access_key": sas.split("&sig=")[0]}, "secret_access_key", "sig missing"),
        ({"secret_access_key": account_sas.replace("srt=o", "srt=c")}, "secret_access_key", "resource types o"),
        ({"secret_access_key": sas + "&sig=again"}, "secret_access_key", "twice"),
    ]  # fmt: skip
    for change, field, words in cases:
        with pytest.raises(InvalidInput) as info:
            validate_config(DestinationConfig(**{**_fields(ok), **change}), customer)
        assert info.value.field == field and words in info.value.message, (change, info.value)
        assert az.signature(sas) not in str(info.value) and "sig=" not in info.value.message
    # The loopback emulator (path-style, plain http) only under the operator's switch.
    local = DestinationConfig(**{**_fields(ok), "endpoint": "http://127.0.0.1:10000"})
    assert validate_config(local, OperatorPolicy(allow_local=True)).endpoint == "http://127.0.0.1:10000"
    assert (
        redact_sas(f"PUT http://h/c/k?sv=1&sp=c&sig={az.signature(sas)} 403")
        == "PUT http://h/c/k?sv=1&sp=c&sig=*** 403"
    )


def _fields(config: DestinationConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_an_account_name_that_resolves_to_a_private_address_is_refused_before_anything_is_sent() -> None:
    """The S3 family's connect-time guard holds for Azure: every answer must be public, and the
    socket goes to the checked address only (DNS rebinding); here the name answers 10.1.2.3."""
    opened: list[object] = []
    config = DestinationConfig(
        "azure", "acme-exports", PREFIX, access_key_id="acmedata", secret_access_key=az.container_sas("acme-exports")
    )
    destination = AzureDestination(
        config,
        OperatorPolicy(),
        resolver=lambda host, port: ["10.1.2.3"],
        connector=opened.append,  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(EndpointRefused, match="resolves to a non-public address"):
        destination.put(f"{PREFIX}/_sequenzy/connection-test-x.txt", b"x")
    assert opened == []
    destination.close()


def test_azure_answers_in_the_customers_words() -> None:
    """Each refusal Azure names says what to change; throttling, 5xx and a changed body are retried;
    a create-only put that meets the blob is an earlier attempt's (409 or 412), nothing else is."""
    sas = az.container_sas("acme-exports", "c")
    place = Place("https://acmedata.blob.core.windows.net", "acme-exports", PREFIX, "", "acmedata", secret=sas)
    now = dt.datetime.now(dt.UTC)

    def said(status: int, code: str, token: str = sas, message: str = "") -> Any:
        answer = AzureAnswer(status, code, message)
        return translate_answer(answer, f"{PREFIX}/x.jsonl.gz", place, parse_sas(token), now)

    expired = az.container_sas("acme-exports", "c", expiry=now - dt.timedelta(hours=1))
    cases: list[tuple[Any, type[Exception], str]] = [
        (said(404, "ContainerNotFound"), NoSuchBucket, "container acme-exports does not exist in storage account acmedata"),
        (said(403, "AuthenticationFailed", expired), BadCredentials, "the SAS token expired at"),
        (said(403, "AuthenticationFailed"), BadCredentials, "its signature does not match"),
        (said(403, "AuthorizationPermissionMismatch"), AccessDenied, "needs the create (c) permission"),
        (said(403, "AuthorizationResourceTypeMismatch"), AccessDenied, "srt=o"),
        (said(403, "AuthorizationSourceIPMismatch"), AccessDenied, "IP addresses"),
        (said(403, "KeyBasedAuthenticationNotPermitted"), AccessDenied, "user delegation SAS"),
        (said(403, "AccountIsDisabled"), DestinationError, "storage account acmedata is disabled"),
        (said(503, "ServerBusy", message="Egress is over the account limit."), RetryableError, "ServerBusy"),
        (said(400, "Md5Mismatch"), RetryableError, "Md5Mismatch"),
        (said(307, ""), DestinationError, "never followed"),
        (said(400, "InvalidHeaderValue", message=f"echo sig={az.signature(sas)}"), DestinationError, "sig=***"),
    ]  # fmt: skip
    for error, kind, words in cases:
        assert type(error) is kind and words in str(error), (kind, str(error))
        assert az.signature(sas) not in str(error)
    assert retryable(AzureAnswer(500, "InternalError", "")) and retryable(AzureAnswer(429, "", ""))
    assert existed(AzureAnswer(409, "BlobAlreadyExists", "")) and existed(AzureAnswer(412, "ConditionNotMet", ""))
    assert not existed(AzureAnswer(412, "LeaseIdMissing", "")) and not existed(
        AzureAnswer(409, "BlobBeingRehydrated", "")
    )
    body = b"<?xml version='1.0'?><Error><Code>ContainerNotFound</Code><Message>The specified container does not exist.\nRequestId:1</Message></Error>"
    assert azure_answer(404, {}, body) == AzureAnswer(
        404, "ContainerNotFound", "The specified container does not exist."
    )


def test_urllib3_debug_lines_never_carry_a_signature() -> None:
    sas = az.container_sas("acme-exports", "c")
    record = logging.LogRecord(
        "urllib3.connectionpool", logging.DEBUG, __file__, 1, '%s "%s %s"', ("h", "PUT", f"/a/b?{sas}"), None
    )
    assert SAS_LOG_FILTER.filter(record)
    assert az.signature(sas) not in record.getMessage() and "sig=***" in record.getMessage()
