DROP TABLE settlement_fences;
DROP INDEX settlements_unresolved;
DROP INDEX settlements_fence;
DROP TABLE settlements;
