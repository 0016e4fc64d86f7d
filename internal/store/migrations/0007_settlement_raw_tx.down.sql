ALTER TABLE settlements DROP COLUMN raw_tx;
