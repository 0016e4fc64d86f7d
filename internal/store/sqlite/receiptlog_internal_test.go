package sqlite

import (
	"strings"
	"testing"
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
