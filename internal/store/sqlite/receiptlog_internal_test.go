package sqlite

import (
	"errors"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/internal/store"
)

// TestReceiptLogReadsIndexed: the receipt log's reads search an index,
// sorting nothing, so that they cost the same however many leaves were
// integrated: the pending page log_entries_pending (migration 0012), a
// range of leaves log_entries_idx, hashes the primary key of log_hashes.
func TestReceiptLogReadsIndexed(t *testing.T) {
	db := openTemp(t)
	tests := []struct {
		name  string
		query string
		args  []any
		index string
	}{
		{"pending", selectPending, []any{100}, "INDEX log_entries_pending "},
		{"leaves", selectLeaves, []any{0, 100}, "INDEX log_entries_idx "},
		{"hashes", selectHashes, []any{"[1,2,3]"}, "SEARCH log_hashes USING INDEX sqlite_autoindex_log_hashes_1 (storage_index=?)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			all := queryPlan(t, db, tc.query, tc.args...)
			if !strings.Contains(all, tc.index) || strings.Contains(all, "TEMP B-TREE") {
				t.Errorf("query plan does not search %s in order:\n%s", tc.index, all)
			}
		})
	}
}

// TestReceiptStatementsPrepared puts receipts on every path of a put (new,
// with and without a leaf, replayed, conflicting, a leaf queued before its
// receipt) and queues a batch of leaves, and checks that each statement ran
// prepared: a query missing from receiptStatements would be compiled on
// every credit-paid call again.
func TestReceiptStatementsPrepared(t *testing.T) {
	ctx := t.Context()
	db := openTemp(t)
	receipt := func(id string, leaf []byte) store.StoredReceipt {
		return store.StoredReceipt{RequestID: id, Owner: "0xabc", Seq: 1, Envelope: []byte("{}"), Leaf: leaf}
	}
	steps := []preparedStep{
		{"put", func() error { return db.PutReceipt(ctx, receipt("r1", []byte("leaf 1"))) }},
		{"put replay", func() error { return db.PutReceipt(ctx, receipt("r1", []byte("leaf 1"))) }},
		{"put without a leaf", func() error { return db.PutReceipt(ctx, receipt("r2", nil)) }},
		{"put conflicting", func() error { return conflict(db.PutReceipt(ctx, receipt("r1", []byte("leaf 2")))) }},
		{"append", func() error {
			return db.AppendLog(ctx, []store.LogEntry{{RequestID: "r3", Leaf: []byte("leaf 3")}, {RequestID: "r1", Leaf: []byte("leaf 1")}})
		}},
		{"put of a queued leaf", func() error { return db.PutReceipt(ctx, receipt("r3", []byte("leaf 3"))) }},
	}
	runPrepared(t, db, steps)
}

// conflict returns nil if err is ErrConflict.
func conflict(err error) error {
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err == nil {
		return errors.New("put not refused")
	}
	return err
}
