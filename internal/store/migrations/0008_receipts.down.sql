DROP INDEX receipts_owner;
DROP TABLE receipts;
