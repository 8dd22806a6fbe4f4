"""The demo and what tests and benchmarks borrow from it; no product code imports this package.

- `generator`: synthetic Sequenzy accounts (subscribers and events) written into a source database.
- `run`: ``seqexport demo``, a day of generated data for two accounts exported into local folders
  through Dagster, on an instance under the demo folder.
- `ticker`: what the sensor daemon and the run launcher do, done in this process (one sensor tick,
  then its runs with ``execute_in_process``).

`run` and `ticker` drive a Dagster instance, so they import dagster: like `definitions.py`, this
package sits above the core and the Dagster wiring in `defs/`, and nothing below it imports it.
"""
