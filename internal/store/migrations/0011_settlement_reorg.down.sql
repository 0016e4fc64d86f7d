DROP INDEX settlements_recent;
ALTER TABLE settlements DROP COLUMN lost_to;
ALTER TABLE settlements DROP COLUMN reorgs;
ALTER TABLE settlements DROP COLUMN reorg;
