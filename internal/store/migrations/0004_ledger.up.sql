-- The credits ledger (store.Ledger): double-entry and append-only (D16).
-- Every operation writes one row of ledger_entries and its postings, which
-- sum to zero; nothing in those two tables is ever updated or deleted.
-- Balances of user and held accounts, holds and key usage are state derived
-- from the journal, written in the same transaction.
--
-- Same portable subset as 0001: TEXT, SMALLINT, BIGINT, CHECK, partial
-- indexes, INSERT ... ON CONFLICT; times are unix milliseconds (UTC) in
-- BIGINT. Amounts are atomic units in BIGINT, each at most 10^15
-- (store.MaxAmount), so that the conditional updates do their arithmetic in
-- SQL, atomically, without leaving int64.

-- The journal. op_class is the namespace of op_id: a credit's id is the
-- caller's (a settlement reference), a hold's is the hold id, and the one
-- capture, release or expiry of a hold has the hold id in class 'resolve'.
-- args is the canonical text of the arguments that identify the operation,
-- to tell a replay (same) from a conflict (other).
CREATE TABLE ledger_entries (
    seq           BIGINT NOT NULL PRIMARY KEY CHECK (seq > 0),
    op_class      TEXT   NOT NULL,
    op_id         TEXT   NOT NULL,
    kind          TEXT   NOT NULL,
    asset         TEXT   NOT NULL,
    owner         TEXT   NOT NULL,
    hold_id       TEXT   NOT NULL DEFAULT '',
    args          TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    CHECK ((op_class = 'credit' AND kind = 'credit' AND hold_id = '')
        OR (op_class = 'hold' AND kind = 'hold' AND hold_id = op_id)
        OR (op_class = 'resolve' AND kind IN ('capture', 'release', 'expire') AND hold_id = op_id))
);

-- Every operation is applied once.
CREATE UNIQUE INDEX ledger_entries_op ON ledger_entries (op_class, op_id);

-- One row per account an entry touches. balance_after is the account's
-- balance after the entry for user and held accounts, 0 for the system
-- accounts (deposits, revenue, loss), whose balances are sums of postings.
CREATE TABLE ledger_postings (
    seq           BIGINT NOT NULL REFERENCES ledger_entries (seq),
    account       TEXT   NOT NULL,
    asset         TEXT   NOT NULL,
    delta         BIGINT NOT NULL,
    balance_after BIGINT NOT NULL,
    PRIMARY KEY (seq, account)
);

-- Statements, and the balances of the system accounts.
CREATE INDEX ledger_postings_account ON ledger_postings (account, asset, seq);

-- Balances of the user and held accounts: a hold is one conditional UPDATE
-- of the user row (WHERE balance >= amount). The CHECK is the last line of
-- defence, never the guard the code relies on.
CREATE TABLE ledger_balances (
    account TEXT   NOT NULL,
    asset   TEXT   NOT NULL,
    balance BIGINT NOT NULL CHECK (balance >= 0),
    PRIMARY KEY (account, asset)
);

-- Holds: the reservation of a call's maximum cost, resolved once (captured,
-- released, or expired by the sweep). actual is the cost the capture was
-- asked for; what was billed is min(actual, amount).
CREATE TABLE ledger_holds (
    hold_id             TEXT   NOT NULL PRIMARY KEY,
    owner               TEXT   NOT NULL,
    asset               TEXT   NOT NULL,
    amount              BIGINT NOT NULL CHECK (amount >= 0),
    actual              BIGINT NOT NULL DEFAULT 0 CHECK (actual >= 0),
    key_id              TEXT   NOT NULL DEFAULT '',
    key_period_ms       BIGINT NOT NULL DEFAULT 0 CHECK (key_period_ms >= 0),
    key_period_start_ms BIGINT NOT NULL DEFAULT 0,
    state               TEXT   NOT NULL CHECK (state IN ('held', 'captured', 'released', 'expired')),
    expires_at_ms       BIGINT NOT NULL,
    created_at_ms       BIGINT NOT NULL,
    seq                 BIGINT NOT NULL REFERENCES ledger_entries (seq),
    resolved_at_ms      BIGINT NOT NULL DEFAULT 0,
    resolved_seq        BIGINT NOT NULL DEFAULT 0,
    CHECK (state = 'captured' OR actual = 0),
    CHECK ((state = 'held' AND resolved_seq = 0) OR (state <> 'held' AND resolved_seq > seq))
);

-- The sweep's work list: open holds by expiry.
CREATE INDEX ledger_holds_expiry ON ledger_holds (expires_at_ms, hold_id) WHERE state = 'held';

-- What each API key has spent (captured holds, billed part) and holds (open
-- holds), per asset, over its life; a hold through a key with a total cap is
-- one conditional UPDATE of this row.
CREATE TABLE ledger_key_usage (
    key_id TEXT   NOT NULL,
    asset  TEXT   NOT NULL,
    held   BIGINT NOT NULL CHECK (held >= 0),
    spent  BIGINT NOT NULL CHECK (spent >= 0),
    PRIMARY KEY (key_id, asset)
);

-- The same per cap window: period_ms long, starting at period_start_ms
-- (aligned to the unix epoch).
CREATE TABLE ledger_key_periods (
    key_id          TEXT   NOT NULL,
    asset           TEXT   NOT NULL,
    period_ms       BIGINT NOT NULL CHECK (period_ms > 0),
    period_start_ms BIGINT NOT NULL,
    held            BIGINT NOT NULL CHECK (held >= 0),
    spent           BIGINT NOT NULL CHECK (spent >= 0),
    PRIMARY KEY (key_id, asset, period_ms, period_start_ms)
);

-- The sequence counter: exactly one row. PostgreSQL may use a SEQUENCE
-- instead, drawn while the entry's balance rows are locked, so the entries
-- of one account get increasing seqs in commit order.
CREATE TABLE ledger_seq (
    id   SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    last BIGINT   NOT NULL CHECK (last >= 0)
);
INSERT INTO ledger_seq (id, last) VALUES (1, 0);
