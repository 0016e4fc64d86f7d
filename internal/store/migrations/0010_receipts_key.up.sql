-- One API key's receipts, newest first (GET /v1/receipts with a
-- key lists that key's receipts only; a session may ask for one key's with
-- ?key_id=). Without it the key's list walks every receipt of the owner in
-- receipts_owner and reads each row to test key_id, or scans the table on
-- PostgreSQL: about 0.2 s for an owner with 200,000 receipts, on every page,
-- however few the key has. owner leads because every query names it: a key
-- id is only ever looked up within its owner.
CREATE INDEX receipts_owner_key ON receipts (owner, key_id, seq, request_id);
