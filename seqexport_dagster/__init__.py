"""Sequenzy Data Exports: the export core and its Dagster wiring.

The folders are the layers, from the top: the front ends (`cli`, `service`, `defs` with
`definitions`, `demo`), `management`, `delivery`, the control plane (`store`) and `source`,
`destination`, `contract`; `errors`, `clock` and `progress` are shared by all. A module imports its
own layer and those below it (`seqexport_dagster_tests/test_structure.py`).

Importing this package has no side effects. The public surface is `seqexport_dagster.management.api`
(customer operations) and `seqexport_dagster.definitions` (the Dagster code location).
"""

__version__ = "0.1.0"
