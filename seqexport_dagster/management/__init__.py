"""Management: the operations a customer or an operator asks for, and how their answers look.

The layer under the front ends (the CLI, the HTTP service, the Dagster wiring) and above delivery:
`api` (create, pause, move, rotate, export now, delete, backfill), `tenancy` (who may see which
export), `status`, `health` and `history` (what an export is doing), `presentation` (the shapes an
answer takes on the wire), `remote` (the same operations over HTTP), the webhook endpoints
(`webhooks_api`, `remote_webhooks`, `webhook_presentation`), `role_setup`, `terminal` (text from
outside made safe to print) and `verify` (the customer's proof that a bucket holds everything).
"""
