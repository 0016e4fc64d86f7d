package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// TestCancelledWriteDoesNotCommitLater: a write whose
// context is cancelled while it waits for a row another transaction holds
// must stop on the server, not only in the client. With pgx's default
// (close the socket) the server goes on waiting, and once the row is free
// the abandoned statement runs and commits: a claim, a recovery record or a
// nonce consumption nobody was told about. Each case holds the row the
// write needs, cancels the write while the server shows it waiting, frees
// the row, waits until the server runs nothing for the store, and checks
// that the write left nothing behind and that the pool still works.
func TestCancelledWriteDoesNotCommitLater(t *testing.T) {
	const app = "llm4agents-cancel-test"
	expires := func() time.Time { return time.Now().Add(time.Hour) }
	tests := []struct {
		name string
		// hold runs in the holder's open transaction, which then ends
		// with end (ROLLBACK or COMMIT).
		hold, end string
		write     func(context.Context, *DB) error
		// left reports what the cancelled write left behind, if anything;
		// then again runs the write with a live context.
		left, again func(context.Context, *DB) error
	}{{
		name: "ClaimPayment behind an uncommitted claim",
		hold: `INSERT INTO payments (payment_key, network, payer, amount, state, owner, fence,
    lease_until_ms, expires_at_ms, created_at_ms, updated_at_ms)
VALUES ('k', 'n', 'p', '1', 'held', 'holder', 1099511627776, 0, 9000000000000, 0, 0)`,
		end: "ROLLBACK",
		write: func(ctx context.Context, db *DB) error {
			_, _, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Network: "n", Payer: "p", Amount: "1",
				Owner: "cancelled", ExpiresAt: expires()}, time.Minute)
			return err
		},
		left: func(ctx context.Context, db *DB) error {
			c, err := db.Payment(ctx, "k")
			if err == nil {
				return errors.New("claimed by " + c.Owner)
			}
			return ignoreNotFound(err)
		},
		again: func(ctx context.Context, db *DB) error {
			_, ok, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Network: "n", Payer: "p", Amount: "1",
				Owner: "again", ExpiresAt: expires()}, time.Minute)
			if err == nil && !ok {
				err = errors.New("not held")
			}
			return err
		},
	}, {
		name: "BeginRecovery behind the fence counter",
		hold: `SELECT 1 FROM recovery_fences FOR UPDATE`,
		end:  "ROLLBACK",
		write: func(ctx context.Context, db *DB) error {
			_, _, err := db.BeginRecovery(ctx, store.Recovery{Key: "k", OperationID: "op-cancelled", ExpiresAt: expires()}, time.Minute)
			return err
		},
		left: func(ctx context.Context, db *DB) error {
			r, err := db.Recovery(ctx, "k")
			if err == nil {
				return errors.New("begun as " + r.OperationID)
			}
			return ignoreNotFound(err)
		},
		again: func(ctx context.Context, db *DB) error {
			_, ok, err := db.BeginRecovery(ctx, store.Recovery{Key: "k", OperationID: "op-again", ExpiresAt: expires()}, time.Minute)
			if err == nil && !ok {
				err = errors.New("not held")
			}
			return err
		},
	}, {
		name: "ConsumeNonce behind a reader of the nonce",
		hold: `SELECT 1 FROM auth_nonces WHERE nonce = 'n0nce0000000000000001' FOR UPDATE`,
		end:  "COMMIT",
		write: func(ctx context.Context, db *DB) error {
			return db.ConsumeNonce(ctx, "n0nce0000000000000001")
		},
		left: func(context.Context, *DB) error { return nil }, // again tells
		again: func(ctx context.Context, db *DB) error {
			return db.ConsumeNonce(ctx, "n0nce0000000000000001")
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			_, dsn := freshSchema(t)
			db := open(t, withParam(t, dsn, "application_name", app), nil, nil)
			if err := db.PutNonce(ctx, "n0nce0000000000000001", time.Hour); err != nil {
				t.Fatal(err)
			}
			holder := rawConn(t, ctx, dsn)
			t.Cleanup(func() { _ = holder.Close(context.Background()) })
			for _, sql := range []string{"BEGIN", tc.hold} {
				if _, err := holder.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}

			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := waitFor(func() error { return tc.write(wctx, db) })
			untilServer(t, holder, app, "the write to wait for the lock",
				`SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`)
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled write = %v, want a context.Canceled error", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the cancelled write did not return")
			}

			if _, err := holder.Exec(ctx, tc.end); err != nil {
				t.Fatal(err)
			}
			// An abandoned statement would run now: wait until it is done.
			untilServer(t, holder, app, "the store's connections to be idle",
				`SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'`)
			if err := tc.left(ctx, db); err != nil {
				t.Errorf("the cancelled write committed later: %v", err)
			}
			if err := tc.again(ctx, db); err != nil {
				t.Errorf("the write again, after the cancelled one: %v", err)
			}
		})
	}
}

// untilServer polls query (one boolean, $1 the store's application_name)
// on conn until it is true, for at most 10 seconds.
func untilServer(t *testing.T, conn *pgx.Conn, app, what, query string) {
	t.Helper()
	for range 200 {
		var ok bool
		if err := conn.QueryRow(t.Context(), query, app).Scan(&ok); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

// ignoreNotFound is nil for store.ErrNotFound and err otherwise.
func ignoreNotFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
