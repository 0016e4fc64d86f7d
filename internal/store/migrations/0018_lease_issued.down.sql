ALTER TABLE ledger_holds DROP COLUMN issued;
