-- Every account's receipts, newest first by the time the store kept them
-- (store.RecentReceipts: the operator's dashboard reads a recent window of
-- all receipts). Without it the listing scans every receipt and sorts them,
-- on every refresh of the dashboard. request_id follows created_at_ms
-- because the listing orders receipts of one millisecond by it.
CREATE INDEX receipts_created ON receipts (created_at_ms, request_id);
