"""One measurement, in a fresh process: ``python -m benchmarks.child TASK 'JSON params'``.

Prints one JSON line: wall and CPU seconds of the measured section only (setup excluded), peak RSS
of the whole process (``VmHWM``), the RSS before the measured section, and task-specific figures.
"""

from __future__ import annotations

import json
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.data import ACCOUNT, DAY0, SUBSCRIBER_ACCOUNT
from benchmarks.procinfo import peak_rss_mb

#: In the run's scratch folder: an empty, migrated control plane that engine runs copy.
CONTROL_TEMPLATE = "control-template.db"


@dataclass
class Result:
    wall: float = 0.0
    cpu: float = 0.0
    rows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _rss_mb() -> float:
    """Current resident set size, from /proc (ru_maxrss only gives the peak)."""
    with open("/proc/self/statm") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize() / 2**20


@contextmanager
def timed(result: Result) -> Iterator[None]:
    result.extra["rss_before_mb"] = round(_rss_mb(), 1)
    cpu, wall = time.process_time(), time.perf_counter()
    yield
    result.wall += time.perf_counter() - wall
    result.cpu += time.process_time() - cpu
    result.extra |= _rss_parts_mb()


def _rss_parts_mb() -> dict[str, float]:
    """Resident memory now, split: anonymous (the process's own) and file-backed (mapped libraries'
    pages, shared with every process mapping the same files, and clean: the kernel can drop them)."""
    with open("/proc/self/status") as handle:
        found = {k: v.split() for k, v in (line.split(":", 1) for line in handle if ":" in line)}
    return {"rss_anon_end_mb": int(found["RssAnon"][0]) / 1024, "rss_file_end_mb": int(found["RssFile"][0]) / 1024}


def start_together() -> None:
    """Processes measured side by side (`run.side_by_side`) start their timed sections at the same
    instant: each says it is set up, then waits for the word that every one of them is."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()


def _window_sql(dialect: str = "sqlite") -> str:
    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.source.reader import select_list

    mark = "%s" if dialect == "postgresql" else "?"
    return (
        f"SELECT {select_list(DATASETS['email_events'], dialect)} FROM email_events "
        f"WHERE account_id = {mark} AND recorded_at > {mark} AND recorded_at <= {mark} ORDER BY recorded_at, id"
    )


def _params(p: dict[str, Any]) -> tuple[str, str, str]:
    from seqexport_dagster.contract.window import iso_ms

    return ACCOUNT, iso_ms(p.get("from_ms", DAY0)), iso_ms(p["to_ms"])


# --- the engine ------------------------------------------------------------------------------


def _world(p: dict[str, Any], work: Path, destination: Any) -> tuple[Any, str]:
    from seqexport_dagster.delivery.assembly import control_plane_at, source_at
    from seqexport_dagster.delivery.runner import Runner
    from seqexport_dagster.destination.policy import OperatorPolicy
    from seqexport_dagster.store.crypto import new_key_spec

    template = Path(p["tmp"]) / CONTROL_TEMPLATE if p.get("tmp") else None
    control = Path(p["control_path"]) if p.get("control_path") else work / "control.db"
    if template is not None and template.exists() and not control.exists():
        # A control plane migrated by the runner, as a deploy would: the measured process need not.
        shutil.copyfile(template, control)
    store = control_plane_at(f"sqlite:///{control}", new_key_spec("bench"))
    if template is None or not template.exists():
        store.migrate()
    dataset = p.get("dataset", "email_events")
    account = SUBSCRIBER_ACCOUNT if dataset == "subscribers" else ACCOUNT
    now = DAY0 + 3 * 86_400_000
    export = store.create_export(
        account_id=account,
        destination=destination,
        datasets=(dataset,),
        frequency="24h",
        lag_ms=0,
        now_ms=now,
        file_format=p.get("format", "jsonl.gz"),
    )
    reader = source_at(p["source_url"], **({"batch_size": p["batch"]} if "batch" in p else {}))
    factory = p.get("_factory")
    kwargs = {"destination_factory": factory} if factory else {}
    return Runner(store, reader, OperatorPolicy(allow_local=True), clock=lambda: now, **kwargs), export.id


def engine(p: dict[str, Any]) -> Result:
    """Runner.write_window of one window into a local folder (or S3 when ``p['s3']`` is given)."""
    from seqexport_dagster.contract.window import Window, day_of
    from seqexport_dagster.destination.config import DestinationConfig

    result = Result()
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        work = Path(tmp)
        s3 = p.get("s3")
        if s3:
            destination = DestinationConfig(
                "s3", s3["bucket"], region="us-east-1", endpoint=s3["endpoint"],
                access_key_id="bench", secret_access_key="bench-secret",
            )  # fmt: skip
            p["_factory"] = _timed_factory(result)
        else:
            destination = DestinationConfig("local", str(work / "bucket"))
        runner, export_id = _world(p, work, destination)
        if p.get("format") == "parquet":
            # What a run worker loads once for all its windows, not per window: outside the clock, as
            # DuckDB's and pyarrow's own imports are (~0.3 CPU-s, measured apart in the compare notes).
            # The writer first: it sets Arrow's allocator before pyarrow's first import, as in a worker.
            from seqexport_dagster.delivery import parquet_writer  # noqa: F401

            if p["source_url"].startswith("postgresql"):  # the Arrow read path (SQLite rows never load it)
                # What a worker loads once, at its first window from PostgreSQL: psycopg2 (libpq and
                # OpenSSL inside) and Arrow's CSV reader (`source/csv_read.py`). DuckDB's LOAD and
                # ATTACH are outside its clock too.
                import psycopg2  # noqa: F401
                import pyarrow.csv  # noqa: F401

                from seqexport_dagster.delivery import arrow_check  # noqa: F401
                from seqexport_dagster.source import csv_read  # noqa: F401
        if p.get("together"):
            start_together()
            result.extra["started_at"] = time.time()
        with timed(result):
            if p.get("dataset") == "subscribers":
                report: Any = runner.write_snapshot(export_id, day_of(DAY0))
            else:
                report = runner.write_window(export_id, "email_events", Window(p.get("from_ms", DAY0), p["to_ms"]))
        result.extra["ended_at"] = time.time()
        result.rows = report.rows
        result.extra |= {"parts": report.parts, "bytes": report.bytes}
    return result


def _timed_factory(result: Result) -> Callable[..., Any]:
    from seqexport_dagster.destination.factory import open_destination

    result.extra["upload_s"] = 0.0

    class Timed:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def put(self, key: str, body: bytes, *, create_only: bool = True) -> Any:
            started = time.perf_counter()
            outcome = self.inner.put(key, body, create_only=create_only)
            result.extra["upload_s"] += time.perf_counter() - started
            return outcome

        def describe(self) -> str:
            return str(self.inner.describe())

        def close(self) -> None:
            self.inner.close()

    return lambda config, policy: Timed(open_destination(config, policy))


# --- the floor: the same pipeline with nothing but its four steps ------------------------------

FLOOR_STEPS = ("read", "build", "encode", "compress")


def floor(p: dict[str, Any]) -> Result:
    """The engine's pipeline stripped to its four steps (DBAPI fetchmany of 500 rows -> Structs ->
    msgspec encode_lines -> isal level 1 in the engine's fixed slices, `writer.Deflater`, in 50k-line
    parts), streamed like the engine: nothing is kept, so each batch stays in cache. What the engine
    would cost with no ledger, no destination and no bookkeeping. Each step is timed around its call, once per batch of 500 rows: the clock
    reads (a system call each, ~0.6 µs) cost ~5 ns a row, 0.2 % of the floor."""
    import msgspec

    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.delivery.writer import PART_LIMIT, Deflater, _row_builder
    from seqexport_dagster.source.reader import DEFAULT_BATCH

    build = _row_builder(DATASETS["email_events"])
    encode = msgspec.json.Encoder().encode_lines
    size = DEFAULT_BATCH
    if p.get("dsn"):  # PostgreSQL: the engine's server-side cursor and batch (reader.py)
        import psycopg2

        from seqexport_dagster.source.reader import POSTGRES_BATCH

        size, pg = POSTGRES_BATCH, psycopg2.connect(p["dsn"])
        cur = pg.cursor(name="floor")
        cur.itersize = size
        sql, params = _window_sql("postgresql"), _params(p)
    else:
        cur = sqlite3.connect(p["source_path"]).cursor()
        sql, params = _window_sql(), _params(p)
    batches_per_part = PART_LIMIT // size
    clock = time.process_time
    spent = dict.fromkeys(FLOOR_STEPS, 0.0)
    rows = json_bytes = gzip_bytes = batches = 0
    deflater = Deflater(1)
    result = Result()
    with timed(result):
        t0 = clock()
        cur.execute(sql, params)
        while True:
            batch = cur.fetchmany(size)
            t1 = clock()
            spent["read"] += t1 - t0
            if not batch:
                break
            rows += len(batch)
            structs = build(batch)
            t2 = clock()
            lines = encode(structs)
            t3 = clock()
            json_bytes += len(lines)
            deflater.write(lines)
            batches += 1
            if batches == batches_per_part:  # a part is full: the same gzip members as the engine's
                gzip_bytes += len(deflater.finish())
                deflater = Deflater(1)
                batches = 0
            t0 = clock()
            spent["build"] += t2 - t1
            spent["encode"] += t3 - t2
            spent["compress"] += t0 - t3
        if batches or rows == 0:
            gzip_bytes += len(deflater.finish())
    result.rows = rows
    result.extra |= {
        "phases": {k: {"cpu": v} for k, v in spent.items()},  # CPU only: steps have no wall time of their own
        "json_bytes": json_bytes,
        "gzip_bytes": gzip_bytes,
    }
    return result


def gzip_levels(p: dict[str, Any]) -> Result:
    """The engine's JSON lines compressed by isal level 1 as the engine feeds it (`writer.Deflater`)
    and by zlib level 6 (gzip's default, and DuckDB's), batch by batch into 50k-line members, only
    the compression timed."""
    import zlib

    import msgspec

    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.delivery.writer import GZIP_WBITS, PART_LIMIT, Deflater, _row_builder
    from seqexport_dagster.source.reader import DEFAULT_BATCH

    build = _row_builder(DATASETS["email_events"])
    encode = msgspec.json.Encoder().encode_lines
    deflater = Deflater(1)
    zlib6 = zlib.compressobj(6, zlib.DEFLATED, GZIP_WBITS)
    spent = {"isal1": 0.0, "zlib6": 0.0}
    size = {"isal1": 0, "zlib6": 0}
    rows = batches = 0
    cur = sqlite3.connect(p["source_path"]).execute(_window_sql(), _params(p))
    while batch := cur.fetchmany(DEFAULT_BATCH):
        lines = encode(build(batch))
        rows += len(batch)
        batches += 1
        full = batches % (PART_LIMIT // DEFAULT_BATCH) == 0  # a full part: a new gzip member
        t = time.process_time()
        deflater.write(lines)
        if full:
            size["isal1"] += len(deflater.finish())
            deflater = Deflater(1)
        t2 = time.process_time()
        size["zlib6"] += len(zlib6.compress(lines))
        if full:
            size["zlib6"] += len(zlib6.flush())
            zlib6 = zlib.compressobj(6, zlib.DEFLATED, GZIP_WBITS)
        t3 = time.process_time()
        spent["isal1"] += t2 - t
        spent["zlib6"] += t3 - t2
    if batches % (PART_LIMIT // DEFAULT_BATCH) or rows == 0:  # the last, partial part
        t = time.process_time()
        size["isal1"] += len(deflater.finish())
        t2 = time.process_time()
        size["zlib6"] += len(zlib6.flush())
        spent["isal1"] += t2 - t
        spent["zlib6"] += time.process_time() - t2
    result = Result(wall=0.0, cpu=spent["isal1"], rows=rows)
    result.extra |= {
        "bytes": size["isal1"],
        "zlib6": {
            "rows": rows,
            "wall": 0.0,
            "cpu": spent["zlib6"],
            "bytes": size["zlib6"],
            "peak_rss_mb": peak_rss_mb(),
        },  # fmt: skip
    }
    return result


# --- peers -----------------------------------------------------------------------------------


def duckdb_copy(p: dict[str, Any]) -> Result:
    """DuckDB's COPY ... (FORMAT JSON, COMPRESSION GZIP) of the same rows. DuckDB's sqlite extension
    cannot be installed offline, so the rows are loaded into a DuckDB table first (not timed): the
    figure is DuckDB's best case, without its read."""
    import duckdb
    import pyarrow as pa

    from seqexport_dagster.contract.schema import DATASETS

    result = Result()
    names = list(DATASETS["email_events"].field_names)
    cur = sqlite3.connect(p["source_path"]).execute(_window_sql(), _params(p))
    columns: list[list[Any]] = [[] for _ in names]
    while batch := cur.fetchmany(50_000):
        for i, values in enumerate(zip(*batch, strict=True)):
            columns[i].extend(values)
    table = pa.table({n: pa.array(c, type=pa.string()) for n, c in zip(names, columns, strict=True)})
    del columns
    db = duckdb.connect()
    db.execute(f"SET threads = {int(p.get('threads', 1))}")
    if "async_threads" in p:
        db.execute(f"SET async_threads = {int(p['async_threads'])}")
    db.register("arrow_table", table)
    db.execute("CREATE TABLE email_events AS SELECT * FROM arrow_table")
    db.unregister("arrow_table")
    del table
    parquet = p.get("format") == "parquet"
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        out = Path(tmp) / ("email_events.parquet" if parquet else "email_events.jsonl.gz")
        options = "FORMAT PARQUET, COMPRESSION ZSTD" if parquet else "FORMAT JSON, COMPRESSION GZIP"
        with timed(result):
            db.execute(
                f"COPY (SELECT {', '.join(names)} FROM email_events ORDER BY recorded_at, id) TO '{out}' ({options})"
            )
        result.extra["bytes"] = out.stat().st_size
    result.rows = int(db.execute("SELECT count(*) FROM email_events").fetchone()[0])  # type: ignore[index]
    return result


def pandas_json(p: dict[str, Any]) -> Result:
    """pandas read_sql + to_json(orient='records', lines=True, compression='gzip'), all timed."""
    import pandas as pd

    result = Result()
    conn = sqlite3.connect(p["source_path"])
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        out = Path(tmp) / "email_events.jsonl.gz"
        with timed(result):
            frame = pd.read_sql(_window_sql(), conn, params=_params(p))
            frame.to_json(out, orient="records", lines=True, compression="gzip")
        result.rows = len(frame)
        result.extra["bytes"] = out.stat().st_size
    return result


def pandas_parquet(p: dict[str, Any]) -> Result:
    """pandas read_sql + to_parquet(engine='pyarrow', compression='zstd'), all timed: the usual script."""
    import pandas as pd

    result = Result()
    conn = sqlite3.connect(p["source_path"])
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        out = Path(tmp) / "email_events.parquet"
        with timed(result):
            frame = pd.read_sql(_window_sql(), conn, params=_params(p))
            frame.to_parquet(out, engine="pyarrow", compression="zstd", index=False)
        result.rows = len(frame)
        result.extra["bytes"] = out.stat().st_size
    return result


def source_read(p: dict[str, Any]) -> Result:
    """SourceReader.window_batches alone (the engine's read path), rows consumed and dropped."""
    from seqexport_dagster.contract.window import Window
    from seqexport_dagster.delivery.assembly import source_at

    result = Result()
    reader = source_at(p["source_url"], **({"batch_size": p["batch"]} if "batch" in p else {}))
    with timed(result):
        for batch in reader.window_batches("email_events", ACCOUNT, Window(p.get("from_ms", DAY0), p["to_ms"])):
            result.rows += len(batch)
    return result


def pg_copy(p: dict[str, Any]) -> Result:
    """``COPY (SELECT ...) TO STDOUT``: PostgreSQL's text stream, not parsed into rows (a floor)."""
    import psycopg2

    result = Result()
    conn = psycopg2.connect(p["dsn"])

    class Sink:
        size = 0
        lines = 0

        def write(self, data: bytes | str) -> None:
            self.size += len(data)
            self.lines += data.count(b"\n") if isinstance(data, bytes) else data.count("\n")

    sink = Sink()
    sql = _window_sql("postgresql")
    with conn.cursor() as cur, timed(result):
        cur.copy_expert(cur.mogrify(f"COPY ({sql}) TO STDOUT", _params(p)).decode(), sink, size=1 << 20)
    conn.close()
    result.rows = sink.lines
    result.extra["bytes"] = sink.size
    return result


def pyarrow_stream(p: dict[str, Any]) -> Result:
    """pyarrow as a user would stream a window into one zstd Parquet file, with no checks: SQLite rows
    fetched 5,000 at a time and built into columns by ``pa.array`` (pandas imported, as it then is);
    from PostgreSQL (``pg_uri``), ADBC's Arrow batches written as they come. Timed from the query on."""
    import adbc_driver_postgresql.dbapi as adbc  # imports pandas, as ``pa.array`` would: outside the clock
    import pyarrow as pa
    import pyarrow.parquet as pq

    from seqexport_dagster.contract.schema import DATASETS
    from seqexport_dagster.delivery.parquet_writer import arrow_schema

    ds = DATASETS["email_events"]
    schema = arrow_schema(ds)
    result = Result()
    with tempfile.TemporaryDirectory(dir=p.get("tmp")) as tmp:
        out = Path(tmp) / "email_events.parquet"
        with timed(result):
            writer = pq.ParquetWriter(out, schema, compression="zstd", use_dictionary=False)
            if p.get("pg_uri"):
                conn = adbc.connect(p["pg_uri"])
                cur = conn.cursor()
                cur.execute(_window_sql("postgresql").replace("%s", "'{}'").format(*_params(p)))
                for batch in cur.fetch_record_batch():
                    arrays = [c.cast(f.type) for c, f in zip(batch.columns, schema, strict=True)]
                    writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
                    result.rows += batch.num_rows
                cur.close()
                conn.close()
            else:
                rows = sqlite3.connect(p["source_path"]).execute(_window_sql(), _params(p))
                while batch := rows.fetchmany(5_000):
                    columns = [pa.array(c, type=pa.string()) for c in zip(*batch, strict=True)]
                    arrays = [c.cast(f.type) for c, f in zip(columns, schema, strict=True)]
                    writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
                    result.rows += len(batch)
            writer.close()
        result.extra["bytes"] = out.stat().st_size
    return result


def spin(p: dict[str, Any]) -> Result:
    """Pure interpreter work touching no memory to speak of: how the machine's two vCPUs scale when
    the work needs neither cache nor memory bandwidth (the calibration of the two-core figure)."""
    result = Result()
    if p.get("together"):
        start_together()
    result.extra["started_at"] = time.time()
    with timed(result):
        total = 0
        for i in range(p.get("loops", 20_000_000)):
            total += i
    result.extra["ended_at"] = time.time()
    result.rows = p.get("loops", 20_000_000)
    return result


TASKS: dict[str, Callable[[dict[str, Any]], Result]] = {
    "spin": spin,
    "gzip_levels": gzip_levels,
    "source_read": source_read,
    "pg_copy": pg_copy,
    "engine": engine,
    "floor": floor,
    "duckdb": duckdb_copy,
    "pandas": pandas_json,
    "pandas_parquet": pandas_parquet,
    "pyarrow_stream": pyarrow_stream,
}


def main(argv: list[str]) -> int:
    task, params = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    if task in ("tick", "worker", "runs"):
        from benchmarks import control

        run = {"tick": control.tick, "worker": control.worker, "runs": control.runs_simulation}[task]
        found = run(params)
        sys.stdout.write(json.dumps(found | {"task": task, "peak_rss_mb": peak_rss_mb()}) + "\n")
        return 0
    result = TASKS[task](params)
    out = {"task": task, "wall": result.wall, "cpu": result.cpu, "rows": result.rows, "peak_rss_mb": peak_rss_mb()}
    sys.stdout.write(json.dumps(out | result.extra) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
