DROP INDEX receipts_created;
