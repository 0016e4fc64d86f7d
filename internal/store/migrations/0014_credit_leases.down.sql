DROP TABLE ledger_lease_draws;
ALTER TABLE ledger_holds DROP COLUMN drawn_cost;
ALTER TABLE ledger_holds DROP COLUMN drawn;
ALTER TABLE ledger_holds DROP COLUMN lease;
