-- The answer a buyer paid for, staged with its claim while the settlement is
-- pending (D3), so that re-presenting the same PAYMENT-SIGNATURE
-- receives it once the settlement is mined (D14), never calling the upstream
-- again. All three are NULL while nothing is staged.
--
-- BLOB is SQLite's byte string; a PostgreSQL backend rewrites it to BYTEA.
ALTER TABLE payments ADD COLUMN staged_status INTEGER;
ALTER TABLE payments ADD COLUMN staged_content_type TEXT;
ALTER TABLE payments ADD COLUMN staged_body BLOB;
-- The fingerprint of the request the staged answer belongs to (D14): a
-- different request presenting the same payment gets a conflict, not this answer.
ALTER TABLE payments ADD COLUMN staged_fingerprint TEXT;
