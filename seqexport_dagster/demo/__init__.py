"""The demo, and what the tests and benchmarks borrow from it (generated data, the in-process ticker).

- `generator`: synthetic Sequenzy accounts (subscribers and events) written into a source database.
- `run`: ``seqexport demo``, a day of generated data for two accounts exported into local folders
  through Dagster, on an instance under the demo folder.
- `ticker`: what the sensor daemon and the run launcher do, done in this process (one sensor tick,
  then its runs with ``execute_in_process``).

`run` and `ticker` drive a Dagster instance, so they import dagster. Like `definitions.py`, this
package is an entry point above the core and the Dagster wiring in `defs/`: only the CLI's ``demo``
command, the tests and the benchmarks import it, and the core never does.
"""
