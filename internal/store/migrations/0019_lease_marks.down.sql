DROP TABLE ledger_lease_marks;
