"""A seeded deterministic simulator of Data Exports (issue 22): one seed, one reproducible world.

Real: the planner (`planner.due_work`, `planner.batch`), the batch runs (`BatchRunner.run`), the
window and snapshot runner, delivery and the part ledger, both part writers (gzip JSONL and
Parquet: each export's format is drawn, and changed at random times), reconciliation, the writer
lease, the control plane and the source (SQLite files, or PostgreSQL when given URLs),
`api.Exports` for operations (delete included), `backfill.backfill`, and `verify` (`verify_bucket`,
with and without the ledger, reading both formats).

Simulated: the object store (`bucket`: in-memory buckets with each provider's create-only and
precondition semantics, reached through the product's destination factory, botocore's three sends
per PUT included), the faults (`faults`: store answers, revoked keys, control-plane errors, a
killed worker, lapsing leases), time (the injected clock; the batch runs' in-run retry sleeps
advance it, reconciliation's take no time), the source's writers (`source`), and the scheduler
sensor's loop (`world.World.tick` calls the functions the sensor calls, without Dagster). The
customer loaders are `loaders`; the invariants `oracles`. `run.simulate(seed)` runs one seed;
``python -m seqexport_dagster_tests.support.sim`` runs seeds for a time budget (``make sim``) or
an export-day budget in worker processes (``make sim-long``, `budget`).
"""
