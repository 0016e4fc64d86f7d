package sqlite

import (
	"errors"
	"path/filepath"
	"testing"

	sqlitedrv "modernc.org/sqlite"
)

// openTemp opens a store in a temporary directory for an internal test
// and closes it when the test ends.
func openTemp(t *testing.T) *DB {
	t.Helper()
	db, err := Open(t.Context(), filepath.Join(t.TempDir(), "llm4agents.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

// TestPragmas checks the settings every connection must run with; they are
// per connection, so both pools are checked.
func TestPragmas(t *testing.T) {
	db := openTemp(t)
	tests := []struct {
		pragma   string
		rw, ro   string
		skipOnRO bool
	}{
		{pragma: "journal_mode", rw: "wal", ro: "wal"},
		{pragma: "busy_timeout", rw: "5000", ro: "5000"},
		{pragma: "foreign_keys", rw: "1", ro: "1"},
		{pragma: "synchronous", rw: "2", skipOnRO: true}, // 2 = FULL
		{pragma: "temp_store", rw: "2", skipOnRO: true},  // 2 = MEMORY
		{pragma: "query_only", rw: "0", ro: "1"},
	}
	for _, tc := range tests {
		var got string
		if err := db.rw.QueryRowContext(t.Context(), "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.rw {
			t.Errorf("writer: PRAGMA %s = %s, want %s", tc.pragma, got, tc.rw)
		}
		if tc.skipOnRO {
			continue
		}
		if err := db.ro.QueryRowContext(t.Context(), "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.ro {
			t.Errorf("reader: PRAGMA %s = %s, want %s", tc.pragma, got, tc.ro)
		}
	}
}

// TestMapErrHidesDriverTypes checks that no driver error type escapes.
func TestMapErrHidesDriverTypes(t *testing.T) {
	db := openTemp(t)
	_, err := db.rw.ExecContext(t.Context(), "INSERT INTO settlement_fences (id, last) VALUES (1, 0)")
	var se *sqlitedrv.Error
	if !errors.As(err, &se) {
		t.Fatalf("duplicate insert: %v, want a driver error to start from", err)
	}
	if mapped := mapErr(t.Context(), err); errors.As(mapped, &se) {
		t.Errorf("mapErr(%v) still holds a *sqlite.Error", err)
	}
}
