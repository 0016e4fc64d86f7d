package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/migrations"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// open opens path and closes it when the test ends.
func open(tb testing.TB, path string, now func() time.Time) *sqlite.DB {
	tb.Helper()
	db, err := sqlite.Open(tb.Context(), path, nil)
	if err != nil {
		tb.Fatalf("Open(%q): %v", path, err)
	}
	if now != nil {
		db.Now = now
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("Close(): %v", err)
		}
	})
	return db
}

// TestSettlements runs the conformance suite with two DB values on one
// temporary file, as two processes would share it.
func TestSettlements(t *testing.T) {
	storetest.RunSettlements(t, func(t *testing.T, now func() time.Time) (a, b store.Settlements) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}

// raw opens path without the store, to look at what the store wrote.
func raw(tb testing.TB, path string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("sqlite", path+"?_busy_timeout=5000")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

func appliedVersions(tb testing.TB, path string) []int {
	tb.Helper()
	rows, err := raw(tb, path).QueryContext(tb.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			tb.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return vs
}

// TestReopen checks that records survive closing and reopening the file, and
// that reopening applies no migration twice.
func TestReopen(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "llm4agents.db")
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, m := range all {
		want = append(want, m.Version)
	}

	db, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := store.Settlement{Key: "k", Network: "eip155:8453", Asset: "0xa", Payer: "0xb", PayTo: "0xc",
		Amount: "115792089237316195423570985008687907853269984665640564039457584007913129639935", Owner: "o"}
	s, ok, err := db.ClaimSettlement(ctx, in, time.Hour)
	if err != nil || !ok {
		t.Fatalf("ClaimSettlement() = %v, %v", ok, err)
	}
	if err := db.UpdateSettlement(ctx, "k", s.Fence, store.StateSettled, "0xhash", ""); err != nil {
		t.Fatal(err)
	}
	if set, err := db.MarkSuccessReported(ctx, "k"); !set || err != nil {
		t.Fatalf("MarkSuccessReported() = %v, %v", set, err)
	}
	before, err := db.Settlement(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	for i := range 2 {
		db := open(t, path, nil)
		after, err := db.Settlement(ctx, "k")
		if err != nil {
			t.Fatalf("reopen %d: Settlement(): %v", i, err)
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("reopen %d: record (-before close +after reopen):\n%s", i, diff)
		}
		if set, err := db.MarkSuccessReported(ctx, "k"); set || err != nil {
			t.Errorf("reopen %d: MarkSuccessReported() = %v, %v; want false, nil", i, set, err)
		}
		// The fence counter survives too: a new claim never reuses a fence.
		s2, ok, err := db.ClaimSettlement(ctx, store.Settlement{Key: "k" + string(rune('0'+i)), Amount: "1"}, time.Hour)
		if err != nil || !ok || s2.Fence <= s.Fence {
			t.Errorf("reopen %d: ClaimSettlement() = fence %d, %v, %v; want a fence above %d", i, s2.Fence, ok, err, s.Fence)
		}
		s = s2
		if got := appliedVersions(t, path); !cmp.Equal(want, got) {
			t.Errorf("reopen %d: schema_migrations versions = %v, want %v", i, got, want)
		}
	}
}

// TestOpenRefusesNewerSchema checks that a binary never runs against a schema
// it does not know.
func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llm4agents.db")
	db, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	r := raw(t, path)
	if _, err := r.ExecContext(t.Context(), `INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (9999, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err := sqlite.Open(t.Context(), path, nil); err == nil {
		_ = db.Close()
		t.Fatal("Open() of a file with an unknown migration succeeded, want an error")
	}
}

func TestOpenRefusesPaths(t *testing.T) {
	for _, path := range []string{"", ":memory:", "file:x.db", "x.db?mode=memory", "x.db#frag"} {
		if db, err := sqlite.Open(t.Context(), path, nil); err == nil {
			_ = db.Close()
			t.Errorf("Open(%q) succeeded, want an error", path)
		}
	}
}

// TestMigrationsDown checks that every down migration undoes its up
// migration, so the down files are never left untested.
func TestMigrationsDown(t *testing.T) {
	ctx := t.Context()
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "llm4agents.db")
	schema := func(db *sql.DB) string {
		t.Helper()
		rows, err := db.QueryContext(ctx, `SELECT type, name, COALESCE(sql, '') FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name`)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rows.Close() }() // rows.Err reports what iterating hit
		var b strings.Builder
		for rows.Next() {
			var typ, name, text string
			if err := rows.Scan(&typ, &name, &text); err != nil {
				t.Fatal(err)
			}
			b.WriteString(typ + " " + name + ": " + text + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	r := raw(t, path)
	empty := schema(r)
	var after []string // after[i]: the schema with migrations 1..i+1 applied
	for _, m := range all {
		if _, err := r.ExecContext(ctx, m.Up); err != nil {
			t.Fatalf("%04d up: %v", m.Version, err)
		}
		after = append(after, schema(r))
	}
	for i, m := range slices.Backward(all) {
		if _, err := r.ExecContext(ctx, m.Down); err != nil {
			t.Fatalf("%04d down: %v", m.Version, err)
		}
		want := empty
		if i > 0 {
			want = after[i-1]
		}
		if diff := cmp.Diff(want, schema(r)); diff != "" {
			t.Errorf("%04d down leaves a different schema than before its up (-want +got):\n%s", m.Version, diff)
		}
	}
}

// TestLockedDatabase checks that a write waiting for another connection's
// lock gives up with the caller's deadline, as an error that carries the
// context error and no driver type.
func TestLockedDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llm4agents.db")
	db := open(t, path, nil)

	holder := raw(t, path)
	conn, err := holder.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := conn.Close(); err != nil {
			t.Error(err)
		}
	})
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") }()

	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, _, err = db.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1"}, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ClaimSettlement() on a locked database = %v, want a DeadlineExceeded error", err)
	}
	if waited := time.Since(began); waited > 3*time.Second {
		t.Errorf("ClaimSettlement() gave up after %v, want about the 200ms deadline", waited)
	}
	if !strings.Contains(err.Error(), `claim settlement "k"`) {
		t.Errorf("error %q does not name the operation", err)
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
		t.Errorf("error %q matches a store sentinel", err)
	}
	// Reads do not wait for the writer (WAL).
	if _, err := db.Settlement(t.Context(), "k"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Settlement() during a write lock = %v, want ErrNotFound", err)
	}
}

// TestPayments runs the payments conformance suite with two DB values on one
// temporary file, as two processes would share it.
func TestPayments(t *testing.T) {
	storetest.RunPayments(t, func(t *testing.T, now func() time.Time) (a, b store.Payments) {
		path := filepath.Join(t.TempDir(), "llm4agents.db")
		return open(t, path, now), open(t, path, now)
	})
}
