DROP INDEX receipts_owner_key;
