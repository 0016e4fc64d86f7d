package sqlite

import (
	"strings"
	"testing"
)

// TestReceiptsOfIndexed: both forms of ReceiptsOf's query search an index
// in the order they list, sorting nothing: the owner's list receipts_owner,
// one key's list receipts_owner_key (migration 0010), rather than reading
// every receipt of the owner to test its key.
func TestReceiptsOfIndexed(t *testing.T) {
	db := openTemp(t)
	tests := []struct {
		name  string
		keyed bool
		args  []any
		index string
	}{
		{"owner", false, []any{"0xaa", int64(1) << 62, 20}, "receipts_owner "},
		{"one key", true, []any{"0xaa", int64(1) << 62, 20, "0xkey"}, "receipts_owner_key "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			all := queryPlan(t, db, selectReceiptsOf(tc.keyed), tc.args...)
			if !strings.Contains(all, "INDEX "+tc.index) || strings.Contains(all, "TEMP B-TREE") {
				t.Errorf("query plan does not search %sin order:\n%s", tc.index, all)
			}
		})
	}
}

// TestRecentReceiptsIndexed: RecentReceipts's query searches
// receipts_created (migration 0016) in the order it lists, sorting
// nothing, rather than scanning every owner's receipts.
func TestRecentReceiptsIndexed(t *testing.T) {
	db := openTemp(t)
	all := queryPlan(t, db, selectRecentReceipts, int64(1)<<40, 20)
	if !strings.Contains(all, "INDEX receipts_created ") || strings.Contains(all, "TEMP B-TREE") {
		t.Errorf("query plan does not search receipts_created in order:\n%s", all)
	}
}

// queryPlan returns the steps of query's plan on the read pool, one a line,
// with a space at the end so that an index name can be matched whole.
func queryPlan(t *testing.T, db *DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.ro.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n") + " "
}
