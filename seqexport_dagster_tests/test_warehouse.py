"""Warehouse statements are generated from the contract, and docs/customers.md shows exactly those."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from seqexport_dagster.contract import warehouse
from seqexport_dagster.contract.schema import DATASETS, TIMESTAMP_PATTERN, Field
from seqexport_dagster.contract.warehouse_types import duckdb_columns
from seqexport_dagster.contract.window import iso_ms, parse_iso_ms

CUSTOMER_DOC = (Path(__file__).parent.parent / "docs" / "customers.md").read_text()

#: Redshift's documented example for ISO 8601 under TIMEFORMAT 'auto' (automatic-recognition page).
REDSHIFT_AUTO_ISO_EXAMPLE = "2019-02-11T05:09:12.195Z"


@pytest.mark.parametrize("name", ["snowflake", "bigquery", "redshift", "duckdb"])
def test_customer_doc_shows_the_generated_statements(name: str) -> None:
    statement = warehouse.GENERATORS[name](DATASETS["email_events"])
    assert statement in CUSTOMER_DOC, (
        f"docs/customers.md's {name} block drifted from seqexport_dagster.contract.warehouse"
    )


def test_customer_doc_shows_the_generated_type_table() -> None:
    assert warehouse.type_table() in CUSTOMER_DOC


def _declared(statement: str) -> dict[str, str]:
    """`  name TYPE [NOT NULL]` column lines of a CREATE TABLE."""
    return {m[1]: m[2] for m in re.finditer(r"^  ([a-z_]+)\s+([A-Z][A-Za-z0-9_(),<> ]*?),?$", statement, re.M)}


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_field_with_its_type_in_every_warehouse(name: str) -> None:
    ds = DATASETS[name]
    required = {f.name for f in ds.fields if not f.nullable}

    redshift = _declared(warehouse.redshift(ds).split(";")[0])
    assert list(redshift) == list(ds.field_names)
    for f in ds.fields:
        assert redshift[f.name] == warehouse.redshift_type(f) + (" NOT NULL" if f.name in required else "")

    bigquery = _declared(warehouse.bigquery(ds).split("WITH PARTITION")[0])
    assert bigquery == {f.name: warehouse.bigquery_type(f) for f in ds.fields}

    snowflake = warehouse.snowflake(ds)
    casts = re.findall(r"raw:([a-z_]+)::(\S+)\s+AS ([a-z_]+)", snowflake)
    assert casts == [(f.name, warehouse.snowflake_type(f), f.name) for f in ds.fields]

    duck = warehouse.duckdb(ds)
    assert duckdb_columns(ds) in duck
    assert re.findall(r"'([a-z_]+)': '([A-Z\[\]]+)'", duck) == [(f.name, warehouse.duckdb_type(f)) for f in ds.fields]


def test_types_follow_the_contract() -> None:
    text = Field("x", "string", "", max_length=255)
    assert warehouse.snowflake_type(text) == "VARCHAR(255)"
    assert warehouse.redshift_type(text) == "VARCHAR(1020)"  # bytes: 4 per character
    assert warehouse.redshift_type(Field("x", "string", "", max_length=60_000)) == "VARCHAR(65535)"
    assert warehouse.redshift_type(Field("x", "string", "")) == "VARCHAR(65535)"
    stamp = Field("x", "timestamp", "")
    assert (warehouse.snowflake_type(stamp), warehouse.bigquery_type(stamp)) == ("TIMESTAMP_TZ(3)", "TIMESTAMP")
    assert (warehouse.redshift_type(stamp), warehouse.duckdb_type(stamp)) == ("TIMESTAMPTZ", "TIMESTAMPTZ")
    assert warehouse.bigquery_type(Field("x", "array", "")) == "ARRAY<STRING>"
    assert warehouse.redshift_type(Field("x", "object", "")) == "SUPER"


def test_redshift_timeformat_auto_parses_our_timestamps() -> None:
    """Redshift's 'auto' recognizes ISO 8601 of exactly our shape; our writer produces that shape."""
    assert re.match(TIMESTAMP_PATTERN, REDSHIFT_AUTO_ISO_EXAMPLE)
    assert iso_ms(parse_iso_ms(REDSHIFT_AUTO_ISO_EXAMPLE)) == REDSHIFT_AUTO_ISO_EXAMPLE
    for ms in (0, 1, 999, 1_790_726_400_000, 1_790_812_799_999):
        assert re.match(TIMESTAMP_PATTERN, iso_ms(ms))
    statement = warehouse.redshift(DATASETS["email_events"])
    assert "FORMAT AS JSON 'auto ignorecase'" in statement and "GZIP TIMEFORMAT 'auto'" in statement
    # 'auto ignorecase' matches keys to columns case-insensitively; ours are lower case already.
    assert all(name == name.lower() for ds in DATASETS.values() for name in ds.field_names)


def test_bigquery_partition_column_collides_with_no_field() -> None:
    for ds in DATASETS.values():
        # BigQuery column names are case-insensitive: `Date` would collide too.
        assert warehouse.PARTITION_COLUMN not in {n.lower() for n in ds.field_names}
        statement = warehouse.bigquery(ds)
        assert "WITH PARTITION COLUMNS (date DATE)" in statement
        assert f"uris = ['gs://acme-exports/sequenzy/{ds.name}/*.jsonl.gz']" in statement  # never _SUCCESS


def test_every_statement_deduplicates_on_id() -> None:
    for ds in DATASETS.values():
        order = "updated_at" if ds.is_snapshot else "recorded_at"
        for name, generate in warehouse.GENERATORS.items():
            statement = generate(ds)
            (over,) = re.findall(r"ROW_NUMBER\(\) OVER \(PARTITION BY (\S+) ORDER BY (\S+) DESC\)", statement)
            assert over[0] in ("id", "raw:id::VARCHAR") and order in over[1], (name, over)


def test_redshift_replaces_a_snapshot_in_one_transaction() -> None:
    statement = warehouse.redshift(DATASETS["subscribers"])
    assert "BEGIN;\nDELETE FROM subscribers;\nINSERT INTO subscribers" in statement
    assert statement.endswith("COMMIT;")
    assert "FROM 's3://acme-exports/sequenzy/subscribers/date=2026-09-30/subscribers-'" in statement


def test_module_prints_statements(capsys: pytest.CaptureFixture[str]) -> None:
    assert warehouse.main(["redshift", "sms_events"]) == 0
    assert capsys.readouterr().out == warehouse.redshift(DATASETS["sms_events"]) + "\n"
    assert warehouse.main(["oracle", "sms_events"]) == 2
    assert "warehouse 'oracle' is not one of snowflake, bigquery, redshift, duckdb" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(DATASETS))
def test_snowflake_defines_its_stage_as_json_before_copying_through_it(name: str) -> None:
    """Without FILE_FORMAT = (TYPE = JSON) on the stage, COPY parses the parts as CSV (issue 25)."""
    statement = warehouse.snowflake(DATASETS[name], stage="acme_stage", uri="s3://globex/exp")
    stage, rest = statement.split("\n\n", 1)
    assert stage.startswith("CREATE STAGE IF NOT EXISTS acme_stage\n  URL = 's3://globex/exp/'\n")
    assert stage.endswith("FILE_FORMAT = (TYPE = JSON);")
    assert re.findall(r"@(\w+)/", rest) == ["acme_stage"] and "CREATE STAGE" not in rest


def test_snowflake_subscribers_view_shows_one_day_and_events_every_day() -> None:
    """A snapshot replaces the previous day: COPY one day folder, and the view keeps the latest day only."""
    snapshot = warehouse.snowflake(DATASETS["subscribers"], day="2026-10-01")
    assert "FROM @sequenzy_stage/subscribers/date=2026-10-01/)" in snapshot
    day = "REGEXP_SUBSTR(file, 'date=([0-9-]+)', 1, 1, 'e')"
    assert f"WHERE {day} = (SELECT MAX({day}) FROM subscribers_raw)\nQUALIFY" in snapshot
    assert warehouse.snowflake(DATASETS["subscribers"]) in CUSTOMER_DOC, "the docs' Snowflake snapshot block drifted"
    events = warehouse.snowflake(DATASETS["email_events"])
    assert "FROM @sequenzy_stage/email_events/)" in events and "WHERE" not in events


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_subquery_in_from_has_an_alias_where_the_warehouse_requires_one(name: str) -> None:
    """Redshift (like PostgreSQL) refuses `FROM (SELECT ...) WHERE`: the derived table needs a name."""
    statement = warehouse.redshift(DATASETS[name])
    derived = re.findall(r"FROM \(\n  SELECT .*?\n\)( AS \w+)? WHERE", statement, re.S)
    assert derived == [" AS latest"]


def test_the_duckdb_remote_section_says_how_its_run_was_made() -> None:
    """test_warehouse_duckdb runs the statements over s3:// through httpfs (DuckDB 1.5.5, the release
    whose extension is packaged): the docs say so, and name the packages it takes."""
    section = CUSTOMER_DOC.split("#### Reading `s3://` and `gs://` from DuckDB")[1].split("\n### ")[0]
    assert "duckdb==1.5.5 duckdb-extension-httpfs==1.5.5" in section
    assert (Path(__file__).parent / "support" / "duckdb_httpfs.txt").read_text().split() == [
        "duckdb==1.5.5",
        "duckdb-extension-httpfs==1.5.5",
        "duckdb-extension-azure==1.5.5",  # test_azure: the docs' az:// block against Azurite
        "duckdb-extension-delta==1.5.5",  # test_table: the docs' delta_scan of a Delta table
    ]


def _sql_blocks(text: str) -> list[str]:
    return re.findall(r"```sql\n(.*?)\n```", text, re.S)


def test_every_sql_block_of_the_loading_sections_is_generated_and_run_or_parsed_by_a_test() -> None:
    """Each SQL block under "Load into your warehouse" is one of the generated statements (run or parsed
    by test_warehouse_duckdb, _snowflake, _bigquery_redshift) or one of the few hand-written queries
    listed here with the test that runs it; a new block must join one or the other."""
    from seqexport_dagster.contract import warehouse_both, warehouse_parquet

    section = CUSTOMER_DOC[CUSTOMER_DOC.index("## Load into your warehouse") : CUSTOMER_DOC.index("## Verify a bucket")]
    generated = {
        make(ds)
        for module in (warehouse, warehouse_parquet, warehouse_both)
        for make in module.GENERATORS.values()
        for ds in DATASETS.values()
    }
    by_hand = {
        "SELECT event_type, COUNT(DISTINCT id)": "test_warehouse_duckdb::test_the_docs_query_runs_on_the_jsonl_parts",
        "INSTALL httpfs;": "test_warehouse_duckdb::test_every_duckdb_statement_runs_on_s3_through_httpfs",
        "SELECT event_type, COUNT(*)\nFROM sequenzy.email_events": "parsed below (BigQuery)",
        "INSTALL azure;": "test_azure::test_cli_http_api_and_duckdb_take_azure (run against Azurite)",
        "CREATE STAGE acme_exports_azure": "test_azure::test_the_azure_loading_statements_parse",
        "COPY INTO dbo.email_events": "test_azure::test_the_azure_loading_statements_parse",
        # The Delta table's readers: the DuckDB statement runs over s3:// (the others are the vendors'
        # documented statements, not run here, as the docs say).
        "-- DuckDB (the delta extension;": "test_table::test_delta_rs_and_duckdb_read_the_table_from_moto_and_agree_with_the_source",
    }
    for block in _sql_blocks(section):
        if block in generated:
            continue
        assert any(block.startswith(start) for start in by_hand), f"a SQL block no test checks:\n{block[:200]}"
    bigquery_query = next(b for b in _sql_blocks(section) if b.startswith("SELECT event_type, COUNT(*)"))
    import sqlglot

    assert sqlglot.parse_one(bigquery_query, read="bigquery").find(sqlglot.exp.Table).sql() == "sequenzy.email_events"


def test_the_parquet_section_states_what_the_vendors_require() -> None:
    """Redshift's COPY from Parquet needs the bucket in the database's Region (no REGION parameter), and
    Snowflake's in-place readers come with their preconditions, marked as not run by us."""
    section = CUSTOMER_DOC[CUSTOMER_DOC.index("### Parquet files (the `parquet` format)") :]
    section = section[: section.index("### Subscriber snapshots")]
    assert "must be in the same AWS Region as the Redshift database" in section
    direct = section[section.index("#### Snowflake reading the files in place") :]
    assert "We have not run either of these" in direct
    for precondition in ("external volume", "CATALOG_SOURCE = OBJECT_STORE", "TABLE_FORMAT = HIVE",
                         "TABLE_FORMAT = DELTA", "CREATE ICEBERG TABLE", "preview since 16 October 2026"):  # fmt: skip
        assert precondition in direct, precondition
