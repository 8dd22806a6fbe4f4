"""Support: the helpers shared by the tests and the benchmarks, never tests themselves.

Servers started in their own process group (moto, `seqexport serve`, a hostile endpoint, the
Dagster daemon), the worlds and harnesses tests build, the bucket oracle, fault injection and the
worker scripts run as subprocesses (``python -m seqexport_dagster_tests.support.<worker>``).

Test modules import their shared helpers from here and never from one another; benchmarks import
from ``seqexport_dagster_tests`` only through this package. ``test_structure_of_tests.py`` checks both.
"""
