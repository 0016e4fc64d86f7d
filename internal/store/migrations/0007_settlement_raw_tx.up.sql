-- The signed transaction of a settlement, recorded before it is sent
-- (store.Settlements.RecordBroadcast), so that a crash right after the send
-- leaves a record naming it, and whoever resolves the record can tell its
-- signer and nonce and send the same bytes again if the node dropped them.
-- 0x-prefixed hex, as eth_sendRawTransaction takes it; '' for records that
-- never had one.
ALTER TABLE settlements ADD COLUMN raw_tx TEXT NOT NULL DEFAULT '';
