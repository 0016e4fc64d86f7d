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
	all := queryPlan(t, db, selectStaged, "application/json", time.Time{}.UnixMilli(), time.Time{}.UnixMilli(), "", 10)
	if !strings.Contains(all, "USING INDEX payments_staged") || strings.Contains(all, "TEMP B-TREE") {
		t.Errorf("query plan does not search payments_staged in order:\n%s", all)
	}
}
