"""Sequenzy Data Exports: the export core and its Dagster wiring.

Importing this package has no side effects. The public surface is `seqexport_dagster.api`
(customer operations) and `seqexport_dagster.definitions` (the Dagster code location).
"""

__version__ = "0.1.0"
