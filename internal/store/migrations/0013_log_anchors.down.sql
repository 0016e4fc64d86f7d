DROP INDEX log_anchors_recent;
DROP TABLE log_anchors;
