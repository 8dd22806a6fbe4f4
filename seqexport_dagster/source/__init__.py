"""Sequenzy's own data: the tables we read and the streaming readers (the demo generator is `demo.generator`)."""
