ALTER TABLE payments DROP COLUMN staged_fingerprint;
ALTER TABLE payments DROP COLUMN staged_body;
ALTER TABLE payments DROP COLUMN staged_content_type;
ALTER TABLE payments DROP COLUMN staged_status;
