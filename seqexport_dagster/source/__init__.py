"""Sequenzy's own data: the tables we read, streaming readers, and the demo data generator."""
