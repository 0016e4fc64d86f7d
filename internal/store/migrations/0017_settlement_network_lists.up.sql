-- The reconcilers' work lists, one network at a time: with one facilitator
-- per chain on a shared store, each lists the unresolved records
-- (UnresolvedSettlements) and the recent settled ones (RecentSettlements)
-- of its own network. Led by the network, these read only that network's
-- records, in order, however many another network holds (its node down
-- for a while); settlements_unresolved and settlements_recent stay for the
-- listings of every network. Queries must repeat each WHERE clause for a
-- planner to use the index.
CREATE INDEX settlements_unresolved_network ON settlements (network, created_at_ms, settlement_key)
    WHERE state IN ('claimed', 'broadcast');
CREATE INDEX settlements_recent_network ON settlements (network, updated_at_ms, settlement_key)
    WHERE state = 'settled' AND reorg <> 'lost';
