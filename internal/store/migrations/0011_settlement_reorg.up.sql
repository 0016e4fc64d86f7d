-- What the reconciler last found of a settled record's transaction when it
-- looked for reorgs (store.Settlements.MarkReorg, D17): '' on the
-- chain (or never looked at), 'dropped' taken off the chain by a reorg,
-- 'lost' never to pay (final). reorgs counts the times the transaction was
-- seen gone; lost_to names the transaction that used the authorization
-- instead, or ''. A reorg never changes state, tx_hash or success_reported.
ALTER TABLE settlements ADD COLUMN reorg TEXT NOT NULL DEFAULT '' CHECK (reorg IN ('', 'dropped', 'lost'));
ALTER TABLE settlements ADD COLUMN reorgs BIGINT NOT NULL DEFAULT 0 CHECK (reorgs >= 0);
ALTER TABLE settlements ADD COLUMN lost_to TEXT NOT NULL DEFAULT '';

-- The reconciler's reorg work list (RecentSettlements): settled records not
-- yet lost, newest first. Queries must repeat this WHERE clause for a planner
-- to use the index.
CREATE INDEX settlements_recent ON settlements (updated_at_ms, settlement_key)
    WHERE state = 'settled' AND reorg <> 'lost';
