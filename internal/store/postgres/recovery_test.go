package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestRecoveries runs the recovery conformance suite with two DB values (two
// pools) on one fresh schema, as two replicas would share it.
func TestRecoveries(t *testing.T) {
	storetest.RunRecoveries(t, func(t *testing.T, now func() time.Time) (a, b store.Recoveries) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}

// TestRecoveryHostileInput checks what the shared suite cannot, because
// SQLite accepts it: text PostgreSQL refuses (a NUL byte, invalid UTF-8), an
// operation id another record holds and a replay budget past the column's
// range are errors that are no sentinel, and leave every record as it was.
func TestRecoveryHostileInput(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	db := open(t, dsn, clk.Now, nil)
	good := func(key, op string) store.Recovery {
		return store.Recovery{Key: key, Payer: "0xabc", Fingerprint: "fp", OperationID: op, PaymentKey: "pk",
			ProofHash: "ph", ProofUntil: clk.Now().Add(time.Minute), Amount: "10", Owner: "o", ExpiresAt: clk.Now().Add(time.Hour)}
	}
	first, ok, err := db.BeginRecovery(ctx, good("k1", "op1"), time.Minute)
	if err != nil || !ok {
		t.Fatalf("BeginRecovery(k1) = %v, %v", ok, err)
	}

	for name, mod := range map[string]func(*store.Recovery){
		"NUL in key":             func(r *store.Recovery) { r.Key = "k2\x00" },
		"invalid UTF-8 key":      func(r *store.Recovery) { r.Key = "k2\xff" },
		"NUL in payer":           func(r *store.Recovery) { r.Payer = "0x\x00" },
		"invalid UTF-8 amount":   func(r *store.Recovery) { r.Amount = "1\xc3" },
		"another record's op id": func(r *store.Recovery) { r.OperationID = "op1" },
	} {
		in := good("k2", "op2")
		mod(&in)
		_, ok, err := db.BeginRecovery(ctx, in, time.Minute)
		if err == nil || ok || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
			t.Errorf("%s: BeginRecovery = %v, %v; want an error that is no sentinel", name, ok, err)
		}
	}
	st := store.RecordedResponse{Status: 200, ContentType: "text/\x00plain"}
	if err := db.StageRecovery(ctx, "k1", first.Fence, st); err == nil || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrNotFound) {
		t.Errorf("StageRecovery(NUL in content type) = %v, want an error that is no sentinel", err)
	}
	if got, err := db.Recovery(ctx, "k1"); err != nil || got.State != store.RecoveryInFlight || got.Response != nil ||
		got.Fence != first.Fence || got.OperationID != "op1" {
		t.Errorf("k1 after the refused writes = %+v, %v; want it in flight as begun", got, err)
	}
	var rows int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM recoveries`).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("%d records, %v; want only k1", rows, err)
	}

	// Every byte value survives in a body.
	body := make([]byte, 256)
	for i := range body {
		body[i] = byte(i)
	}
	if err := db.StageRecovery(ctx, "k1", first.Fence, store.RecordedResponse{Status: 200, Body: body}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PromoteRecovery(ctx, "op1", "fp", store.SettlementRef{Network: "n", TxHash: "0x1"}, time.Hour, math.MaxInt32+1); err == nil ||
		errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) {
		t.Errorf("PromoteRecovery(budget past int32) = %v, want an error that is no sentinel", err)
	}
	got, err := db.Recovery(ctx, "k1")
	if err != nil || got.State != store.RecoveryStaged || got.Response == nil || !bytes.Equal(got.Response.Body, body) {
		t.Errorf("k1 after the refused promotion = %+v, %v; want it staged with every byte value", got, err)
	}
}

// TestRecoveryServerClock checks the production path, DB.Now nil: the
// server's clock stamps a record, places its lease and refuses an expiry
// that is not after it.
func TestRecoveryServerClock(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	db := open(t, dsn, nil, nil)
	before := serverMs(t, db)
	r, ok, err := db.BeginRecovery(ctx, store.Recovery{Key: "k", OperationID: "op",
		ExpiresAt: time.UnixMilli(before).Add(time.Hour)}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("BeginRecovery() = %v, %v", ok, err)
	}
	after := serverMs(t, db)
	if ms := r.CreatedAt.UnixMilli(); ms < before || ms > after || !r.LeaseUntil.Equal(r.CreatedAt.Add(time.Minute)) {
		t.Errorf("record = %+v, want CreatedAt in [%d, %d] and a one-minute lease from it", r, before, after)
	}
	_, ok, err = db.BeginRecovery(ctx, store.Recovery{Key: "k2", OperationID: "op2", ExpiresAt: time.UnixMilli(before)}, time.Minute)
	if err == nil || ok || !strings.Contains(err.Error(), "store's time") {
		t.Errorf("BeginRecovery(expiry in the server's past) = %v, %v; want refused", ok, err)
	}
}

// TestPurgeExpiredRecoveries checks that the purge deletes expired records
// only, soonest expired first, up to its limit, and skips a record another
// transaction holds instead of waiting for it.
func TestPurgeExpiredRecoveries(t *testing.T) {
	ctx := t.Context()
	_, dsn := freshSchema(t)
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	db := open(t, dsn, clk.Now, nil)
	for i, ttl := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, time.Hour} {
		r := store.Recovery{Key: fmt.Sprintf("k%d", i), OperationID: fmt.Sprintf("op%d", i), ExpiresAt: clk.Now().Add(ttl)}
		if _, _, err := db.BeginRecovery(ctx, r, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.PurgeExpiredRecoveries(ctx, 0); err == nil {
		t.Error("PurgeExpiredRecoveries(0) succeeded")
	}
	clk.Advance(3 * time.Minute)

	holder := rawConn(t, ctx, dsn)
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	for _, sql := range []string{"BEGIN", `SELECT 1 FROM recoveries WHERE recovery_key = 'k0' FOR UPDATE`} {
		if _, err := holder.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	purged := waitFor(func() error { var err error; n, err = db.PurgeExpiredRecoveries(ctx, 1); return err })
	returns(t, "PurgeExpiredRecoveries() beside a held record", purged)
	if n != 1 {
		t.Errorf("purge(1) = %d, want 1", n)
	}
	if _, err := db.Recovery(ctx, "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("k1 = %v, want it purged (or expired)", err)
	}
	if _, err := holder.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if n, err := db.PurgeExpiredRecoveries(ctx, 10); err != nil || n != 2 {
		t.Errorf("purge(10) = %d, %v; want the 2 left expired", n, err)
	}
	rows, err := db.pool.Query(ctx, `SELECT recovery_key FROM recoveries`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) != 1 || keys[0] != "k3" {
		t.Errorf("records left = %v, %v; want [k3]", keys, err)
	}
}
