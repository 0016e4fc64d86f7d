package sqlite

import (
	"strings"
	"testing"
	"time"
)

// TestStagedPaymentsIndexed: the top-up sweep's query searches migration
// 0009's partial index and sorts nothing, rather than scanning the payments
// table, which holds every chat's claim as well.
func TestStagedPaymentsIndexed(t *testing.T) {
	db := openTemp(t)
	rows, err := db.ro.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+selectStaged, "application/json", time.Time{}.UnixMilli(), time.Time{}.UnixMilli(), "", 10)
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
	all := strings.Join(plan, "\n")
	if !strings.Contains(all, "USING INDEX payments_staged") || strings.Contains(all, "TEMP B-TREE") {
		t.Errorf("query plan does not search payments_staged in order:\n%s", all)
	}
}
