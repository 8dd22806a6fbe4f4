"""The contract: what a customer's files promise, and nothing about how they are made.

The bottom layer of the core, above only the shared `errors`, `clock` and `progress`: windows and
their object keys (`window`, `keys`), the row schemas and their published JSON Schemas (`schema`,
`schema_publish`, ``schemas/``), the file formats (`file_format`), the values a customer may give
(`validation`) and the warehouse loading statements the docs print (`warehouse*`). It imports no
other layer, so every other layer may import it.
"""
