-- The top-up sweep's work list (internal/gateway, topup_sweep.go): claims whose
-- staged response is of one content type and that were settled or are pending
-- with a transaction, oldest first. Partial, so the claims of chat completions
-- that hold no settlement (held, or pending without a transaction) stay out of
-- it; the rest is ordered by staged content type first, so the sweep reads
-- only its own kind. Queries must repeat this WHERE clause for a planner to
-- use the index.
CREATE INDEX payments_staged ON payments (staged_content_type, created_at_ms, payment_key)
    WHERE state IN ('pending', 'settled') AND tx_hash <> '';
