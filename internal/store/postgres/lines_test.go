package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/llm4agents/llm4agents/internal/store"
)

// claimOf is a payment claim of key for the claim-line tests.
func claimOf(key string) store.PaymentClaim {
	return store.PaymentClaim{Key: key, Network: "eip155:84532", Payer: "0x857b06519e91e3a54538791bdbb0e22373e36b66",
		Amount: "10000", Owner: "lines", ExpiresAt: time.Now().Add(time.Hour)}
}

// claimWrite is the claim statement of key as ClaimPayment sends it,
// scanning its fence into fence (NULL when not won).
func claimWrite(key string, fence **int64) *lineWrite {
	c := claimOf(key)
	// n.ms, then the record: seven text columns before its fence, eight after.
	dest := []any{new(int64)}
	for range 7 {
		dest = append(dest, new(any))
	}
	dest = append(dest, fence)
	for range 8 {
		dest = append(dest, new(any))
	}
	return &lineWrite{sql: claimPayment, order: "payments\x00" + key,
		args: []any{nil, c.Key, c.Network, c.Payer, c.Amount, c.Owner, int64(60_000), c.ExpiresAt.UnixMilli()},
		dest: dest}
}

// TestClaimsGroupCommit checks that concurrent claims of distinct keys on
// one DB share transactions (count the distinct xmin of their rows), that
// each is won once, and that the claim lines are gone afterwards.
func TestClaimsGroupCommit(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, won, err := db.ClaimPayment(ctx, claimOf(fmt.Sprintf("k%d", i)), time.Minute)
			if err == nil && !won {
				err = fmt.Errorf("k%d: not won", i)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var rows, txs int
	if err := db.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM payments`).Scan(&rows, &txs); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d claims in %d transactions", rows, txs)
	if rows != n || txs >= rows {
		t.Errorf("%d claims in %d transactions, want %d claims in fewer transactions", rows, txs, n)
	}
	if n := db.lines.Len(); n != 0 {
		t.Errorf("%d lines left behind", n)
	}
}

// TestClaimsBatchNoRow checks that a claim of a batch that wins nothing (a
// settlement claim returns no row then) is that claim's outcome, not the
// batch's: were the batch run again write by write, the claims it won
// would find their own live leases and report a loss.
func TestClaimsBatchNoRow(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	taken := store.Settlement{Key: "taken", Network: "eip155:84532", Asset: "0xasset", Payer: "0xpayer", PayTo: "0xpayto",
		Amount: "1", Owner: "other"}
	if _, won, err := db.ClaimSettlement(ctx, taken, time.Minute); err != nil || !won {
		t.Fatalf("first claim: won %v, %v", won, err)
	}
	settle := func(s store.Settlement) *lineWrite {
		rec := make([]any, strings.Count(columns, ",")+1)
		for i := range rec {
			rec[i] = new(any)
		}
		return &lineWrite{sql: claimSettlement, order: "settlements\x00" + s.Key,
			args: []any{nil, s.Key, s.Network, s.Asset, s.Payer, s.PayTo, s.Amount, s.Owner, int64(60_000)},
			dest: rec}
	}
	fresh := taken
	fresh.Key, fresh.Owner = "fresh", "lines"
	lost := taken
	lost.Owner = "lines"
	batch := []*lineWrite{settle(fresh), settle(lost)}
	db.send(ctx, batch)
	if batch[0].err != nil {
		t.Errorf("the fresh claim of the batch: %v, want it won", batch[0].err)
	}
	if !errors.Is(batch[1].err, pgx.ErrNoRows) {
		t.Errorf("the lost claim of the batch: %v, want no row", batch[1].err)
	}
	rec, err := db.Settlement(ctx, "fresh")
	if err != nil || rec.Owner != "lines" {
		t.Errorf("fresh record = %+v, %v; want it claimed by the batch", rec, err)
	}
}

// TestClaimsBatchLockOrder checks that a batch claims its keys in key
// order, whatever their order in the batch, so two batches (of two
// replicas) never deadlock: here another transaction holds "a" and then
// takes "b", which a batch that claimed "b" before waiting for "a" would
// hold, and the server would abort one of the two after deadlock_timeout.
func TestClaimsBatchLockOrder(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	const app = "llm4agents-lock-order-test"
	log, buf := logger()
	db := open(t, withParam(t, dsn, "application_name", app), nil, log)
	other := rawConn(t, ctx, dsn)
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	if _, err := other.Exec(ctx, "SET deadlock_timeout = '100ms'"); err != nil {
		t.Fatal(err)
	}
	otherClaim := func(key string) error {
		w := claimWrite(key, new(*int64))
		return other.QueryRow(ctx, w.sql, w.args...).Scan(w.dest...)
	}
	if _, err := other.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := otherClaim("a"); err != nil {
		t.Fatal(err)
	}
	var fa, fb *int64
	batch := []*lineWrite{claimWrite("b", &fb), claimWrite("a", &fa)}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		db.send(context.WithoutCancel(ctx), batch)
	}()
	// Wait until the batch waits for the other transaction's lock.
	watcher := rawConn(t, ctx, dsn)
	t.Cleanup(func() { _ = watcher.Close(context.Background()) })
	untilServer(t, watcher, app, "the batch to wait for the other transaction's lock",
		`SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`)
	if err := otherClaim("b"); err != nil {
		t.Errorf("the other transaction's second claim: %v, want no deadlock", err)
	}
	if _, err := other.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	<-sent
	if strings.Contains(buf.String(), "batch failed") {
		t.Errorf("the batch failed and ran write by write:\n%s", buf)
	}
	for _, w := range batch {
		if w.err != nil {
			t.Errorf("batch write: %v", w.err)
		}
	}
	if fa != nil || fb != nil {
		t.Errorf("the batch won a claim the other transaction holds (fences %v, %v)", fa, fb)
	}
}

// TestRolledBack pins down which batch failures are run again write by
// write: only those that show nothing was written. A lost connection or a
// deadline mid-batch may follow the commit, and running a claim again then
// would report it lost to its own lease.
func TestRolledBack(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a statement refused", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "22012", Message: "division by zero"}, true},
		{"refused, wrapped", fmt.Errorf("batch: %w", &pgconn.PgError{Severity: "ERROR", Code: "40P01"}), true},
		{"localized severity", &pgconn.PgError{Severity: "FEHLER", SeverityUnlocalized: "ERROR", Code: "23505"}, true},
		{"a pooler lost its server", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "08P01"}, false},
		{"connection lost", io.ErrUnexpectedEOF, false},
		{"deadline", context.DeadlineExceeded, false},
		{"closed", net.ErrClosed, false},
	}
	for _, tc := range tests {
		if got := rolledBack(tc.err); got != tc.want {
			t.Errorf("%s: rolledBack(%v) = %t, want %t", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestFollowedBatch checks a batch with a then (sendTx): the follow-up
// commits with the batch, and followed is set; when a statement of either
// pipeline fails, nothing of the batch stays (its writes then run one by
// one, each once, without their thens) and followed stays false.
func TestFollowedBatch(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	insert := func(id string) *lineWrite {
		return &lineWrite{sql: `INSERT INTO receipts (request_id, owner, key_id, seq, envelope, created_at_ms)
VALUES ($1, 'o', '', 1, '\x7b7d', 0) RETURNING request_id`, args: []any{id}, dest: []any{new(string)}}
	}
	fails := func() *lineWrite {
		return &lineWrite{sql: `SELECT 1 / (SELECT count(*) FROM receipts WHERE false)`, dest: []any{new(int64)}}
	}
	followedBy := func(w, f *lineWrite) *lineWrite {
		w.then = func() *lineWrite { return f }
		return w
	}
	tests := []struct {
		name  string
		batch func() []*lineWrite
		// kept are the request ids the batch leaves in receipts;
		// followed whether its first write's follow-up committed with it.
		kept     []string
		followed bool
	}{
		{"both pipelines pass", func() []*lineWrite {
			return []*lineWrite{followedBy(insert("a1"), insert("a1-then")), insert("a2")}
		}, []string{"a1", "a1-then", "a2"}, true},
		{"a statement of the first fails", func() []*lineWrite {
			return []*lineWrite{followedBy(insert("b1"), insert("b1-then")), fails()}
		}, []string{"b1"}, false},
		{"a follow-up fails", func() []*lineWrite {
			return []*lineWrite{followedBy(insert("c1"), fails()), insert("c2")}
		}, []string{"c1", "c2"}, false},
		{"a lone write with a follow-up", func() []*lineWrite {
			return []*lineWrite{followedBy(insert("d1"), insert("d1-then"))}
		}, []string{"d1", "d1-then"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			batch := tc.batch()
			prefix := tc.kept[0][:1]
			db.send(ctx, batch)
			if batch[0].err != nil || batch[0].followed != tc.followed {
				t.Errorf("first write: err %v, followed %t; want nil, %t", batch[0].err, batch[0].followed, tc.followed)
			}
			for _, w := range batch[1:] {
				if failing := strings.Contains(w.sql, "/"); failing != (w.err != nil) {
					t.Errorf("write %q: err %v", w.sql, w.err)
				}
			}
			var kept []string
			rows, err := db.pool.Query(ctx, `SELECT request_id FROM receipts WHERE request_id LIKE $1 || '%' ORDER BY request_id`, prefix)
			if err == nil {
				kept, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil || fmt.Sprint(kept) != fmt.Sprint(tc.kept) {
				t.Errorf("receipts left = %v, %v; want %v", kept, err, tc.kept)
			}
			// A failed transaction was ended on its connection: every
			// connection of the pool is idle and answers.
			if n := db.pool.Stat().AcquiredConns(); n != 0 {
				t.Errorf("%d connections still acquired", n)
			}
			for range db.pool.Stat().TotalConns() + 1 {
				var one int
				if err := db.pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
					t.Fatalf("a connection after the batch: %v", err)
				}
			}
		})
	}
}
