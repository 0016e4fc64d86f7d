DROP INDEX payments_staged;
