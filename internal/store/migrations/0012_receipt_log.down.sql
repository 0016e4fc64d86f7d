DROP TABLE log_seq;
DROP TABLE log_state;
DROP TABLE log_hashes;
DROP INDEX log_entries_pending;
DROP INDEX log_entries_idx;
DROP TABLE log_entries;
