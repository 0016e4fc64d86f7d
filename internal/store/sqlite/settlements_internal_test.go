package sqlite

import (
	"strings"
	"testing"
)

// TestSettlementListsIndexed: both forms of the reconciler's listings
// search a partial index in the order they list, sorting nothing: one
// network's records through the indexes led by the network (migration
// 0017), so that another network's records, however many, are never
// read; every network's through settlements_unresolved and
// settlements_recent.
func TestSettlementListsIndexed(t *testing.T) {
	db := openTemp(t)
	tests := []struct {
		name  string
		query string
		args  []any
		index string
	}{
		{"unresolved of one network", selectUnresolved(true), []any{100, "eip155:8453"}, "settlements_unresolved_network "},
		{"unresolved of every network", selectUnresolved(false), []any{100}, "settlements_unresolved "},
		{"recent of one network", selectRecent(true), []any{int64(1) << 40, 100, "eip155:8453"}, "settlements_recent_network "},
		{"recent of every network", selectRecent(false), []any{int64(1) << 40, 100}, "settlements_recent "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			all := queryPlan(t, db, tc.query, tc.args...)
			if !strings.Contains(all, "INDEX "+tc.index) || strings.Contains(all, "TEMP B-TREE") {
				t.Errorf("query plan does not search %sin order:\n%s", tc.index, all)
			}
		})
	}
}
