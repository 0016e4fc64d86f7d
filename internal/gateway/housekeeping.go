package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// The gateway's housekeeping loops: the credit sweeper (top-ups, holds,
// sign-ins) and the purge of expired payment claims and recoveries, which
// waits for the top-up sweep. Each is started by its Start function and
// stopped by Close, as facilitator.Reconciler is; cmd only starts them.

// TopUpSweeper credits settled top-ups nobody came back for; *TopUpSweep is
// one.
type TopUpSweeper interface {
	SweepTopUps(ctx context.Context) (credited int, err error)
}

// HoldSweeper releases expired credit holds; *ledger.Ledger is one.
type HoldSweeper interface {
	SweepExpired(ctx context.Context) (released int, err error)
}

// AuthSweeper deletes expired sign-in nonces and sessions, up to limit at a
// time; store.SignIns is one.
type AuthSweeper interface {
	SweepAuth(ctx context.Context, limit int) (int, error)
}

// PurgeGate says whether expired payment claims may be purged:
// TopUpSweep.SweepBeforePurge sweeps and returns how many expired claims it
// left waiting for their credit. Once expired, a top-up's claim is credited by
// the sweep alone; purging it first would lose a paid top-up.
type PurgeGate interface {
	SweepBeforePurge(ctx context.Context) (waiting int, err error)
}

// ExpiredPurger deletes up to limit expired payment claims at a time. A store
// that also keeps paid answers for replay (store.Recoveries) has
// PurgeExpiredRecoveries too, and the Purger calls it.
type ExpiredPurger interface {
	PurgeExpiredPayments(ctx context.Context, limit int) (int, error)
}

// recoveryPurger is the optional extra of an ExpiredPurger.
type recoveryPurger interface {
	PurgeExpiredRecoveries(ctx context.Context, limit int) (int, error)
}

const (
	// housekeepingBatch is how many records one call of a sweep or purge
	// deletes at most; a loop calls again until a call deletes fewer.
	housekeepingBatch = 500
	// housekeepingTimeout bounds each store call of a round.
	housekeepingTimeout = time.Minute
	// purgeGateTimeout bounds the sweep a purge waits for: longer than a
	// minute sweep, as it may read many claims from the chain.
	purgeGateTimeout = 5 * time.Minute
)

// CreditSweeper runs the credit sweeps at start and then every period until
// Close.
type CreditSweeper struct{ loop }

// StartCreditSweeper credits settled top-ups nobody came back for, releases
// expired holds and deletes expired sign-in nonces and sessions, at start and
// then every period. A hold expires only when the request that took it died:
// the ledger logs how many it released. Errors are logged, never fatal.
//
// The top-up sweep runs first, at once: it also credits top-ups whose claims
// expired while no process ran, and the only thing that deletes an expired
// claim, the Purger, first runs a whole period after its start, and then only
// after a sweep of its own that left no expired top-up waiting (PurgeGate).
func StartCreditSweeper(topUps TopUpSweeper, holds HoldSweeper, auth AuthSweeper, every time.Duration, log *slog.Logger) *CreditSweeper {
	s := &CreditSweeper{}
	s.start(every, true, func(ctx context.Context) { sweepCredits(ctx, topUps, holds, auth, log) })
	return s
}

// sweepCredits is one round of the CreditSweeper.
func sweepCredits(base context.Context, topUps TopUpSweeper, holds HoldSweeper, auth AuthSweeper, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(base, housekeepingTimeout)
	n, err := topUps.SweepTopUps(ctx)
	if err != nil {
		log.Warn("credit settled top-ups", "credited", n, "err", err)
	}
	cancel()
	ctx, cancel = context.WithTimeout(base, housekeepingTimeout)
	defer cancel()
	if _, err := holds.SweepExpired(ctx); err != nil {
		log.Warn("sweep expired holds", "err", err)
	}
	sweepSignIns(ctx, auth, log)
}

// StartSignInSweeper deletes expired sign-in nonces and sessions at start
// and then every period, for a gateway that sells no credits but lets
// payers sign in to read their receipts (with credits, StartCreditSweeper
// does it). Errors are logged, never fatal.
func StartSignInSweeper(auth AuthSweeper, every time.Duration, log *slog.Logger) *CreditSweeper {
	s := &CreditSweeper{}
	s.start(every, true, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, housekeepingTimeout)
		defer cancel()
		sweepSignIns(ctx, auth, log)
	})
	return s
}

// sweepSignIns deletes expired sign-in nonces and sessions in batches.
func sweepSignIns(ctx context.Context, auth AuthSweeper, log *slog.Logger) {
	for {
		n, err := auth.SweepAuth(ctx, housekeepingBatch)
		if err != nil {
			log.Warn("sweep expired sign-ins", "err", err)
		}
		if err != nil || n < housekeepingBatch {
			return
		}
	}
}

// Purger deletes expired payment claims and recoveries every period until
// Close.
type Purger struct{ loop }

// StartPurger deletes expired payment claims and recoveries every period, in
// batches; the first round is one period after the start. With a gate
// (credits on), a round purges payment claims only after a sweep of the gate
// that left no expired claim waiting and failed nowhere; otherwise it keeps
// them all, purges the rest, and logs a warning. A store whose records expire
// by themselves (Redis) purges nothing here, cheaply.
func StartPurger(db ExpiredPurger, gate PurgeGate, every time.Duration, log *slog.Logger) *Purger {
	p := &Purger{}
	p.start(every, false, func(ctx context.Context) { purgeRound(ctx, db, gate, log) })
	return p
}

// purgeRound is one round of the Purger.
func purgeRound(base context.Context, db ExpiredPurger, gate PurgeGate, log *slog.Logger) {
	payments := true
	if gate != nil {
		ctx, cancel := context.WithTimeout(base, purgeGateTimeout)
		waiting, err := gate.SweepBeforePurge(ctx)
		cancel()
		if err != nil || waiting > 0 {
			payments = false
			log.Warn("kept expired payment claims: top-ups may still be waiting for their credit", "waiting", waiting, "err", err)
		}
	}
	if payments {
		purgeBatches(base, "purge expired payments", log, db.PurgeExpiredPayments)
	}
	if r, ok := db.(recoveryPurger); ok {
		purgeBatches(base, "purge expired recoveries", log, r.PurgeExpiredRecoveries)
	}
}

// purgeBatches calls purge with housekeepingBatch until it deletes fewer or
// fails.
func purgeBatches(base context.Context, what string, log *slog.Logger, purge func(ctx context.Context, limit int) (int, error)) {
	for {
		ctx, cancel := context.WithTimeout(base, housekeepingTimeout)
		n, err := purge(ctx, housekeepingBatch)
		cancel()
		if err != nil {
			log.Warn(what, "err", err)
		}
		if err != nil || n < housekeepingBatch {
			return
		}
	}
}

// loop runs a round every period, from start until Close, on one goroutine
// that Close waits for. Each round gets the loop's context, which Close
// cancels: a shutdown does not wait for a long sweep (each round's writes
// are transactions, and the next start sweeps again).
type loop struct {
	stop   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// start starts the goroutine; atStart runs the first round at once rather than
// a period later.
func (l *loop) start(every time.Duration, atStart bool, round func(ctx context.Context)) {
	l.stop = make(chan struct{})
	// The loop is a root of its own, like main: it outlives the caller
	// that started it.
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		if atStart {
			round(ctx)
		}
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			round(ctx)
		}
	})
}

// Close stops the loop, cancels a round in progress and waits for it to end.
func (l *loop) Close() {
	l.cancel()
	close(l.stop)
	l.wg.Wait()
}
