"""The one compiled part: `seqexport_dagster/source/_sqlite_columns.c` (SQLite windows read into Arrow
column buffers for Parquet parts; source/sqlite_read.py). Everything else is in pyproject.toml.

Optional: without a C compiler the package installs without it and SQLite windows are read as rows
(the same bytes, about twice the CPU). It links no SQLite: it calls the library Python's own
``sqlite3`` module uses, found at run time."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "seqexport_dagster.source._sqlite_columns",
            sources=["seqexport_dagster/source/_sqlite_columns.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
