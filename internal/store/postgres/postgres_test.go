package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestSettlements runs the conformance suite with two DB values (two pools)
// on one fresh schema, as two processes would share it.
func TestSettlements(t *testing.T) {
	storetest.RunSettlements(t, func(t *testing.T, now func() time.Time) (a, b store.Settlements) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}

// TestPayments runs the payments conformance suite the same way.
func TestPayments(t *testing.T) {
	storetest.RunPayments(t, func(t *testing.T, now func() time.Time) (a, b store.Payments) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}

// BenchmarkStore runs the benchmarks every backend shares (storetest), on
// the server's clock, one fresh schema per run.
func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(b *testing.B) (store.Settlements, store.Payments) {
		_, dsn := freshSchema(b)
		db := open(b, dsn, nil, nil)
		return db, db
	})
}

// serverMs is the test server's clock in unix milliseconds.
func serverMs(t *testing.T, db *DB) int64 {
	t.Helper()
	var ms int64
	if err := db.pool.QueryRow(t.Context(), `SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestServerClock checks the production path, DB.Now nil: the server's
// clock stamps the records and judges the leases. A claim with a 1 s lease
// holds against another handle at once and is taken over after it.
func TestServerClock(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	a, b := open(t, dsn, nil, nil), open(t, dsn, nil, nil)
	const lease = time.Second

	before := serverMs(t, a)
	s, ok, err := a.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1", Owner: "a"}, lease)
	if err != nil || !ok {
		t.Fatalf("ClaimSettlement() = %v, %v", ok, err)
	}
	p, ok, err := a.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "a", ExpiresAt: time.Now().Add(time.Hour)}, lease)
	if err != nil || !ok {
		t.Fatalf("ClaimPayment() = %v, %v", ok, err)
	}
	after := serverMs(t, a)
	for what, ts := range map[string]time.Time{"settlement": s.CreatedAt, "payment": p.CreatedAt} {
		if ms := ts.UnixMilli(); ms < before || ms > after {
			t.Errorf("%s CreatedAt = %d, want the server's time, in [%d, %d]", what, ms, before, after)
		}
	}
	if !s.LeaseUntil.Equal(s.CreatedAt.Add(lease)) || !p.LeaseUntil.Equal(p.CreatedAt.Add(lease)) {
		t.Errorf("LeaseUntil = %v and %v, want CreatedAt + %v (%v and %v)", s.LeaseUntil, p.LeaseUntil, lease, s.CreatedAt, p.CreatedAt)
	}

	if got, ok, err := b.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1", Owner: "b"}, lease); ok || err != nil || got.Owner != "a" {
		t.Errorf("ClaimSettlement() under the lease = %+v, %v, %v; want a's claim, false", got, ok, err)
	}
	if got, ok, err := b.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "b", ExpiresAt: time.Now().Add(time.Hour)}, lease); ok || err != nil || got.Owner != "a" {
		t.Errorf("ClaimPayment() under the lease = %+v, %v, %v; want a's claim, false", got, ok, err)
	}

	time.Sleep(lease + 200*time.Millisecond) // the only sleep: the server's clock cannot be moved

	s2, ok, err := b.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1", Owner: "b"}, lease)
	if err != nil || !ok || s2.Owner != "b" || s2.Fence <= s.Fence {
		t.Errorf("ClaimSettlement() after the lease = %+v, %v, %v; want b's takeover with a fence above %d", s2, ok, err, s.Fence)
	}
	p2, ok, err := b.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "b", ExpiresAt: time.Now().Add(time.Hour)}, lease)
	if err != nil || !ok || p2.Owner != "b" || p2.Fence <= p.Fence {
		t.Errorf("ClaimPayment() after the lease = %+v, %v, %v; want b's takeover with a fence above %d", p2, ok, err, p.Fence)
	}
	// A claim expiring before the server's time is refused.
	if _, _, err := a.ClaimPayment(ctx, store.PaymentClaim{Key: "old", Amount: "1", ExpiresAt: time.UnixMilli(before)}, lease); err == nil ||
		!strings.Contains(err.Error(), "not after the store's time") {
		t.Errorf("ClaimPayment(expired by the server's clock) = %v, want an error", err)
	}
}

// appliedVersions returns the versions in schema's schema_migrations.
func appliedVersions(t *testing.T, db *DB) []int64 {
	t.Helper()
	rows, err := db.pool.Query(t.Context(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

func allVersions(t *testing.T) []int64 {
	t.Helper()
	all, err := dialectMigrations()
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, m := range all {
		vs = append(vs, int64(m.Version))
	}
	return vs
}

// TestMigrations checks that a fresh schema gets every migration, that
// reopening applies nothing and keeps the records and the fence sequences,
// and that a schema newer than the binary's is refused.
func TestMigrations(t *testing.T) {
	ctx := t.Context()
	want := allVersions(t)
	_, dsn := freshSchema(t)

	log, logs := logger()
	db, err := Open(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := appliedVersions(t, db); !cmp.Equal(want, got) {
		t.Errorf("fresh schema: versions %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "applied migration"); n != len(want) {
		t.Errorf("fresh schema: logged %d applied migrations, want %d:\n%s", n, len(want), logs)
	}
	s, ok, err := db.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1", Owner: "o"}, time.Hour)
	if err != nil || !ok {
		t.Fatalf("ClaimSettlement() = %v, %v", ok, err)
	}
	p, ok, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "o", ExpiresAt: time.Now().Add(time.Hour)}, time.Hour)
	if err != nil || !ok {
		t.Fatalf("ClaimPayment() = %v, %v", ok, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	first := s
	for i := range 2 {
		log, logs := logger()
		db := open(t, dsn, nil, log)
		if strings.Contains(logs.String(), "applied migration") {
			t.Errorf("reopen %d applied migrations:\n%s", i, logs)
		}
		if got := appliedVersions(t, db); !cmp.Equal(want, got) {
			t.Errorf("reopen %d: versions %v, want %v", i, got, want)
		}
		if got, err := db.Settlement(ctx, "k"); err != nil || got != first {
			t.Errorf("reopen %d: Settlement() = %+v, %v; want %+v", i, got, err, first)
		}
		// The sequences go on: a new claim never reuses a fence.
		key := fmt.Sprintf("k%d", i)
		s2, ok, err := db.ClaimSettlement(ctx, store.Settlement{Key: key, Amount: "1"}, time.Hour)
		if err != nil || !ok || s2.Fence <= s.Fence {
			t.Errorf("reopen %d: ClaimSettlement() = fence %d, %v, %v; want a fence above %d", i, s2.Fence, ok, err, s.Fence)
		}
		p2, ok, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: key, Amount: "1", ExpiresAt: time.Now().Add(time.Hour)}, time.Hour)
		if err != nil || !ok || p2.Fence <= p.Fence {
			t.Errorf("reopen %d: ClaimPayment() = fence %d, %v, %v; want a fence above %d", i, p2.Fence, ok, err, p.Fence)
		}
		s, p = s2, p2
	}

	admin(t, dsn, `INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES ($1, 'future', 0)`, len(want)+1)
	if db, err := Open(ctx, dsn, nil); err == nil {
		_ = db.Close()
		t.Fatal("Open() of a schema with an unknown migration succeeded, want an error")
	} else if !strings.Contains(err.Error(), "newer than this binary's") {
		t.Errorf("Open() of a newer schema = %v, want it to say so", err)
	}
}

// TestConcurrentOpen checks that replicas opening one fresh schema at once
// all succeed and apply each migration once.
func TestConcurrentOpen(t *testing.T) {
	const replicas = 4
	want := allVersions(t)
	_, dsn := freshSchema(t)
	log, logs := logger()

	errs := make(chan error, replicas)
	dbs := make(chan *DB, replicas)
	var wg sync.WaitGroup
	startGun := make(chan struct{})
	for range replicas {
		wg.Go(func() {
			<-startGun
			db, err := Open(t.Context(), dsn, log)
			if err != nil {
				errs <- err
				return
			}
			dbs <- db
		})
	}
	close(startGun)
	wg.Wait()
	close(errs)
	close(dbs)
	for db := range dbs {
		t.Cleanup(func() { _ = db.Close() })
	}
	for err := range errs {
		t.Errorf("concurrent Open(): %v", err)
	}
	if n := strings.Count(logs.String(), "applied migration"); n != len(want) {
		t.Errorf("%d concurrent Opens logged %d applied migrations, want %d:\n%s", replicas, n, len(want), logs)
	}
	db := open(t, dsn, nil, nil)
	if got := appliedVersions(t, db); !cmp.Equal(want, got) {
		t.Errorf("versions %v, want %v", got, want)
	}
}

// TestMigrationsDown checks that every down migration, as PostgreSQL runs
// it, undoes its up migration.
func TestMigrationsDown(t *testing.T) {
	ctx := t.Context()
	all, err := dialectMigrations()
	if err != nil {
		t.Fatal(err)
	}
	schema, dsn := freshSchema(t)
	conn := rawConn(t, ctx, dsn)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	describe := func() string {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT c.relkind::text || ' ' || c.relname || ': ' || COALESCE((
    SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY a.attnum)
    FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
WHERE s.nspname = $1 ORDER BY c.relname`, schema)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	empty := describe()
	var after []string // after[i]: the schema with migrations 1..i+1 applied
	for _, m := range all {
		if _, err := conn.Exec(ctx, m.Up); err != nil {
			t.Fatalf("%04d up: %v", m.Version, err)
		}
		after = append(after, describe())
	}
	if !strings.Contains(after[len(after)-1], "staged_body bytea") {
		t.Errorf("staged_body is not BYTEA after every up migration:\n%s", after[len(after)-1])
	}
	for i, m := range slices.Backward(all) {
		if _, err := conn.Exec(ctx, m.Down); err != nil {
			t.Fatalf("%04d down: %v", m.Version, err)
		}
		want := empty
		if i > 0 {
			want = after[i-1]
		}
		if diff := cmp.Diff(want, describe()); diff != "" {
			t.Errorf("%04d down leaves a different schema than before its up (-want +got):\n%s", m.Version, diff)
		}
	}
}

// TestPurgeExpiredPayments checks that the purge deletes expired records
// only, soonest expired first, at most limit at a time, and that a purged
// key claimed again gets a new fence.
func TestPurgeExpiredPayments(t *testing.T) {
	ctx := t.Context()
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	_, dsn := freshSchema(t)
	db := open(t, dsn, clk.Now, nil)
	t0 := clk.Now()
	rows := func() int {
		t.Helper()
		var n int
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	var maxFence int64
	claim := func(key string, expires time.Time) store.PaymentClaim {
		t.Helper()
		c, ok, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: key, Amount: "1", Owner: "o", ExpiresAt: expires}, time.Minute)
		if err != nil || !ok {
			t.Fatalf("ClaimPayment(%q) = %v, %v", key, ok, err)
		}
		maxFence = max(maxFence, c.Fence)
		return c
	}
	states := []store.PaymentState{store.PaymentHeld, store.PaymentPending, store.PaymentSettled}
	for i := 1; i <= 5; i++ {
		key := fmt.Sprintf("k%d", i)
		c := claim(key, t0.Add(time.Duration(i)*time.Minute))
		if st := states[i%len(states)]; st != store.PaymentHeld {
			if err := db.UpdatePayment(ctx, key, c.Fence, st, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim("live", t0.Add(time.Hour))

	if n, err := db.PurgeExpiredPayments(ctx, 10); n != 0 || err != nil {
		t.Errorf("PurgeExpiredPayments() before any expiry = %d, %v; want 0, nil", n, err)
	}
	clk.Advance(3 * time.Minute) // k1, k2 and k3 (expiring at this very millisecond) have expired
	if _, err := db.Payment(ctx, "k3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Payment(expired k3) = %v, want ErrNotFound", err)
	}
	if got := rows(); got != 6 {
		t.Errorf("%d rows before the purge, want 6", got)
	}
	for _, want := range []int{2, 1, 0} {
		if n, err := db.PurgeExpiredPayments(ctx, 2); n != want || err != nil {
			t.Errorf("PurgeExpiredPayments(2) = %d, %v; want %d, nil", n, err, want)
		}
		if want == 2 {
			var left string
			if err := db.pool.QueryRow(ctx, `SELECT string_agg(payment_key, ',' ORDER BY payment_key) FROM payments`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != "k3,k4,k5,live" {
				t.Errorf("after purging 2: rows %s, want k3,k4,k5,live (soonest expired first)", left)
			}
		}
	}
	if got := rows(); got != 3 {
		t.Errorf("%d rows after the purge, want 3 (k4, k5, live)", got)
	}
	for _, key := range []string{"k4", "k5", "live"} {
		if _, err := db.Payment(ctx, key); err != nil {
			t.Errorf("Payment(%q) after the purge: %v", key, err)
		}
	}
	before := maxFence
	if c := claim("k1", clk.Now().Add(time.Hour)); c.Fence <= before {
		t.Errorf("claim after purge got fence %d, want more than every earlier one (%d)", c.Fence, before)
	}
	for _, limit := range []int{0, -1} {
		if n, err := db.PurgeExpiredPayments(ctx, limit); err == nil {
			t.Errorf("PurgeExpiredPayments(%d) = %d, nil; want an error", limit, n)
		}
	}
}

// TestClaimPaymentRoundsExpiryUp checks that an expiry between two
// milliseconds is kept to the later one, so a record never expires early.
func TestClaimPaymentRoundsExpiryUp(t *testing.T) {
	ctx := t.Context()
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	_, dsn := freshSchema(t)
	db := open(t, dsn, clk.Now, nil)
	for i, tc := range []struct{ after, want time.Duration }{
		{1500 * time.Microsecond, 2 * time.Millisecond},
		{500 * time.Microsecond, time.Millisecond},
		{time.Nanosecond, time.Millisecond},
		{3 * time.Millisecond, 3 * time.Millisecond},
	} {
		c, ok, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: fmt.Sprintf("k%d", i), Amount: "1", ExpiresAt: clk.Now().Add(tc.after)}, time.Minute)
		if err != nil || !ok {
			t.Fatalf("ClaimPayment(expires in %v) = %v, %v", tc.after, ok, err)
		}
		if want := clk.Now().Add(tc.want); !c.ExpiresAt.Equal(want) {
			t.Errorf("expires in %v: ExpiresAt = %v, want %v", tc.after, c.ExpiresAt, want)
		}
	}
}

// TestLockedRow checks that a write waiting for a row another transaction
// holds gives up with the caller's deadline, as an error that carries the
// context error, names the operation and is no store sentinel; and that a
// context cancelled before the call is reported as such.
func TestLockedRow(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	s, ok, err := db.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1", Owner: "o"}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("ClaimSettlement() = %v, %v", ok, err)
	}

	holder := rawConn(t, ctx, dsn)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM settlements WHERE settlement_key = 'k' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = db.UpdateSettlement(short, "k", s.Fence, store.StateBroadcast, "0xabc", "")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("UpdateSettlement() on a locked row = %v, want a DeadlineExceeded error", err)
	}
	if waited := time.Since(began); waited > 3*time.Second {
		t.Errorf("UpdateSettlement() gave up after %v, want about the 200ms deadline", waited)
	}
	if !strings.Contains(err.Error(), `update settlement "k"`) {
		t.Errorf("error %q does not name the operation", err)
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
		t.Errorf("error %q matches a store sentinel", err)
	}
	// Reads do not wait for the lock.
	if got, err := db.Settlement(ctx, "k"); err != nil || got != s {
		t.Errorf("Settlement() during the lock = %+v, %v; want %+v", got, err, s)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := db.ClaimSettlement(cancelled, store.Settlement{Key: "k2", Amount: "1"}, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("ClaimSettlement(cancelled ctx) = %v, want a Canceled error", err)
	}
	// The pool recovers from the interrupted statement.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.UpdateSettlement(ctx, "k", s.Fence, store.StateBroadcast, "0xabc", ""); err != nil {
		t.Errorf("UpdateSettlement() after the lock: %v", err)
	}
}
