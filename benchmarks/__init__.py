"""Benchmarks of the export engine against the machine's floor and the tools a user would reach for.

``python -m benchmarks`` (or ``make bench``) measures everything in one run on the same generated
rows and writes ``benchmarks/RESULTS.md``. Every measurement runs in a fresh subprocess, so peak RSS
and CPU time belong to that measurement alone.
"""
