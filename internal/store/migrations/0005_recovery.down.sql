DROP TABLE recovery_fences;
DROP TABLE recoveries;
