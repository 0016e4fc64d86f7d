DROP TABLE ledger_lease_draws;
DROP INDEX ledger_holds_open_leases;
ALTER TABLE ledger_holds DROP COLUMN drawn_cost;
ALTER TABLE ledger_holds DROP COLUMN drawn;
ALTER TABLE ledger_holds DROP COLUMN lease;
