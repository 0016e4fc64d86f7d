package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/llm4agents/llm4agents/internal/store"
)

// Credit leases (store.Leases), in the tables of migrations 0014, 0018 and
// 0019 (the issued mark, in a row of its own while the lease is open; see
// issueMarks). A lease is a row of ledger_holds with lease = 1,
// placed by Hold like a call's hold; its draws are rows of
// ledger_lease_draws. It ends through the ledger's resolve statement
// (CloseLease, or the sweep), which reads drawn and drawn_cost from the
// lease's row under its lock (ledger.go).
//
// # Draw
//
// A batch of draws is one READ COMMITTED transaction of three statements,
// whatever its size:
//
//  1. Lock. SELECT ... FOR UPDATE of the batch's leases, in hold id order.
//     A lease's row is the lock that every write of its draws and its end
//     takes, so while the batch holds it no other Draw draws on the lease
//     and no resolution ends it: what the batch reads next of the lease
//     (drawn, state, the positions taken) stays true until its commit.
//  2. Read. One statement, so one snapshot taken after the locks, of what
//     each draw is decided on: the draw recorded under its call id, whether
//     its position is taken, the receipt and the leaf kept under its call
//     id. The draws are then decided in Go, in order, each seeing what the
//     draws before it in the batch took (decideDraws).
//  3. Write. One statement: the accepted draws' new receipts, leaves and
//     draw rows, each insert ON CONFLICT DO NOTHING, and the conditional
//     UPDATE of their leases' drawn (WHERE drawn <= amount - charged).
//
// No refusal is an SQL error: an error aborts the transaction, and every
// draw of the batch with it. What the leases' locks do not guard (a call id
// drawn on another lease, a receipt or a leaf put by PutReceipt or
// AppendLog) a concurrent transaction may write between the read and the
// write. An insert then finds its row taken and does nothing, the write
// statement reports fewer rows than it was given, and the batch is rolled
// back and run again: its new read sees the row that other transaction
// committed, and refuses the draw, or takes it as the replay it is.
//
// A Draw locks lease rows only, which every ledger write locks after the
// owner's balances and the key's rows, and holds no balance or key row
// that a ledger write could be waiting for. Only a ledger batch (lines.go)
// that ends two leases of one owner in the other order than a Draw locks
// them can deadlock with it; the server then aborts one of the two, and
// each runs again (send runs the batch's writes one by one, Draw its
// batch), as after any deadlock (DB.retry).

const (
	// lockLeases locks the leases $1 and returns them, in one order for
	// every batch, so two batches on the same leases never deadlock.
	lockLeases = `SELECT ` + holdColumns + ` FROM ledger_holds
WHERE hold_id = ANY($1::text[])
ORDER BY hold_id COLLATE "C"
FOR UPDATE`

	// readDraws returns, for each draw ($1 call ids, $2 lease ids, $3
	// positions), in order: the draw recorded under its call id, whether
	// its position is taken in its lease, the receipt kept under its call
	// id, and the leaf queued under it (NULL columns for none).
	readDraws = `SELECT d.lease_id, d.position, d.charged, d.cost,
    EXISTS (SELECT 1 FROM ledger_lease_draws t WHERE t.lease_id = u.lease AND t.position = u.pos),
    r.owner, r.key_id, r.seq, r.envelope,
    l.request_id IS NOT NULL, l.leaf
FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(call, lease, pos, ord)
LEFT JOIN ledger_lease_draws d ON d.call_id = u.call
LEFT JOIN receipts r ON r.request_id = u.call
LEFT JOIN log_entries l ON l.request_id = u.call
ORDER BY u.ord`

	// writeDraws writes the accepted draws of a batch at $1 (nowExpr):
	// new receipts ($2 ids, $3 owners, $4 key ids, $5 seqs, $6 envelopes;
	// a seq of 0 is drawn as PutReceipt draws it), new leaves ($7 ids, $8
	// leaves), draws ($9 call ids, $10 lease ids, $11 positions, $12
	// charged, $13 costs), in their order, and adds the draws to their
	// leases. It returns how many rows each part wrote.
	writeDraws = withNow + `,
r AS (
    INSERT INTO receipts (` + receiptColumns + `)
    SELECT u.id, u.owner, u.key_id, COALESCE(NULLIF(u.seq, 0), nextval('ledger_entry_seq')), u.envelope, n.ms
    FROM n, unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::bytea[])
        WITH ORDINALITY AS u(id, owner, key_id, seq, envelope, ord)
    ORDER BY u.ord
    ON CONFLICT DO NOTHING
    RETURNING 1),
l AS (
    INSERT INTO log_entries (request_id, leaf, seq, queued_at_ms)
    SELECT u.id, u.leaf, nextval('log_entry_seq'), n.ms
    FROM n, unnest($7::text[], $8::bytea[]) WITH ORDINALITY AS u(id, leaf, ord)
    ORDER BY u.ord
    ON CONFLICT (request_id) DO NOTHING
    RETURNING 1),
dr AS (
    INSERT INTO ledger_lease_draws (call_id, lease_id, position, charged, cost, created_at_ms)
    SELECT u.call, u.lease, u.pos, u.charged, u.cost, n.ms
    FROM n, unnest($9::text[], $10::text[], $11::bigint[], $12::bigint[], $13::bigint[])
        AS u(call, lease, pos, charged, cost)
    ON CONFLICT DO NOTHING
    RETURNING 1),
s AS (
    SELECT u.lease, sum(u.charged)::bigint AS charged, sum(u.cost)::bigint AS cost
    FROM unnest($10::text[], $12::bigint[], $13::bigint[]) AS u(lease, charged, cost)
    GROUP BY u.lease),
hu AS (
    UPDATE ledger_holds h SET drawn = h.drawn + s.charged, drawn_cost = LEAST(h.drawn_cost + s.cost, 1000000000000000)
    FROM s
    WHERE h.hold_id = s.lease AND h.lease = 1 AND h.state = 'held' AND h.drawn <= h.amount - s.charged
    RETURNING 1)
SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM l), (SELECT count(*) FROM dr), (SELECT count(*) FROM hu)`
)

// errRaced is a batch of draws whose write found a row taken that its read
// saw free: a concurrent transaction committed it in between. The batch is
// rolled back and run again.
var errRaced = errors.New("a concurrent write took a row the batch read as free")

// Draw implements store.Leases.
func (db *DB) Draw(ctx context.Context, draws []store.LeaseDraw) (_ []error, err error) {
	defer store.Wrap(&err, "postgres", "draw %d", len(draws))
	if err := store.ValidateDraws(draws); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	now := db.nowArg()
	for range ledgerAttempts {
		results, err := db.drawBatch(ctx, now, draws)
		switch {
		case errors.Is(err, errRaced):
			db.log.DebugContext(ctx, "draw batch raced a concurrent write, running it again", "draws", len(draws))
			continue
		case db.retry(ctx, err, "draw"):
			continue
		case err != nil:
			return nil, db.mapErr(ctx, err)
		}
		return results, nil
	}
	return nil, fmt.Errorf("no decision after %d attempts", ledgerAttempts)
}

// drawBatch runs draws once, in a transaction of its own, and commits what
// it decided. Its errors are pgx's, unmapped, so that Draw can tell a
// deadlock (DB.retry) from a failure.
func (db *DB) drawBatch(ctx context.Context, now *int64, draws []store.LeaseDraw) ([]error, error) {
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, err
	}
	defer func() {
		// A no-op after Commit. Bounded on its own: ctx may have ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), store.DefaultTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()

	leases, err := lockDrawnLeases(ctx, tx, draws)
	if err != nil {
		return nil, fmt.Errorf("lock leases: %w", err)
	}
	seen, err := readDrawState(ctx, tx, draws)
	if err != nil {
		return nil, fmt.Errorf("read draws: %w", err)
	}
	results, w := decideDraws(draws, leases, seen)
	if len(w.callIDs) > 0 {
		if err := w.exec(ctx, tx, now); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// lockDrawnLeases locks the holds the draws name and returns the ones that
// exist, by id.
func lockDrawnLeases(ctx context.Context, tx pgx.Tx, draws []store.LeaseDraw) (map[string]*store.Hold, error) {
	ids := make([]string, 0, len(draws))
	seen := map[string]bool{}
	for _, d := range draws {
		if !seen[d.LeaseID] {
			seen[d.LeaseID] = true
			ids = append(ids, d.LeaseID)
		}
	}
	rows, err := tx.Query(ctx, lockLeases, ids)
	if err != nil {
		return nil, err
	}
	holds, err := collect(rows, func(row pgx.Row) (store.Hold, error) {
		h, _, err := scanHold(row)
		return h, err
	})
	if err != nil {
		return nil, err
	}
	leases := make(map[string]*store.Hold, len(holds))
	for i := range holds {
		leases[holds[i].ID] = &holds[i]
	}
	return leases, nil
}

// drawState is what the store holds that a draw is decided on.
type drawState struct {
	// drawn says a draw is recorded under the call id, on lease at
	// position for charged and cost.
	drawn                   bool
	lease                   string
	position, charged, cost int64
	// positionTaken says another draw holds the draw's position in its
	// lease.
	positionTaken bool
	// receipt is the receipt kept under the call id, nil if none.
	receipt *store.StoredReceipt
	// queued says a leaf is queued under the call id: leaf.
	queued bool
	leaf   []byte
}

// readDrawState reads the state of each draw, in order, in one statement.
func readDrawState(ctx context.Context, tx pgx.Tx, draws []store.LeaseDraw) ([]drawState, error) {
	calls, leases, positions := make([]string, len(draws)), make([]string, len(draws)), make([]int64, len(draws))
	for i, d := range draws {
		calls[i], leases[i], positions[i] = d.CallID, d.LeaseID, d.Position
	}
	rows, err := tx.Query(ctx, readDraws, calls, leases, positions)
	if err != nil {
		return nil, err
	}
	states, err := collect(rows, func(row pgx.Row) (drawState, error) {
		var s drawState
		var lease, owner, keyID *string
		var position, charged, cost, seq *int64
		var envelope []byte
		err := row.Scan(&lease, &position, &charged, &cost, &s.positionTaken,
			&owner, &keyID, &seq, &envelope, &s.queued, &s.leaf)
		if err != nil {
			return drawState{}, err
		}
		if lease != nil { // the columns of a row are NOT NULL: all set or none
			s.drawn, s.lease, s.position, s.charged, s.cost = true, *lease, *position, *charged, *cost
		}
		if owner != nil {
			s.receipt = &store.StoredReceipt{Owner: *owner, KeyID: *keyID, Seq: *seq, Envelope: envelope}
		}
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	if len(states) != len(draws) {
		return nil, fmt.Errorf("%d rows for %d draws", len(states), len(draws))
	}
	return states, nil
}

// decideDraws decides each draw, in order, on its lease as locked (leases,
// updated as draws are accepted) and on what the store holds (seen), with
// the draws accepted before it in the batch: the result of each, and what
// to write for the accepted ones. A replay is answered nil and writes
// nothing, as is a receipt or a leaf already kept as the draw gives it.
func decideDraws(draws []store.LeaseDraw, leases map[string]*store.Hold, seen []drawState) ([]error, *drawWrite) {
	type position struct {
		lease string
		n     int64
	}
	results := make([]error, len(draws))
	accepted := map[string]store.LeaseDraw{}
	taken := map[position]bool{}
	w := &drawWrite{leases: map[string]bool{}}
	for i, d := range draws {
		s := seen[i]
		prev, ok := accepted[d.CallID]
		if !ok && s.drawn {
			prev = store.LeaseDraw{LeaseID: s.lease, Position: s.position, Charged: s.charged, Cost: s.cost}
			ok = true
		}
		if ok {
			if prev.LeaseID != d.LeaseID || prev.Position != d.Position || prev.Charged != d.Charged || prev.Cost != d.Cost {
				results[i] = fmt.Errorf("call %s drew before with other arguments: %w", d.CallID, store.ErrConflict)
			}
			continue // else a replay: recorded before, receipt and all
		}
		h, ok := leases[d.LeaseID]
		switch {
		case !ok:
			results[i] = fmt.Errorf("lease %s: %w", d.LeaseID, store.ErrNotFound)
		case !h.Lease:
			results[i] = fmt.Errorf("hold %s is not a lease: %w", d.LeaseID, store.ErrConflict)
		case h.State != store.HoldHeld:
			results[i] = fmt.Errorf("lease %s is %s: %w", d.LeaseID, h.State, store.ErrConflict)
		case d.Charged > h.Amount-h.Drawn:
			results[i] = fmt.Errorf("lease %s has %d left, the draw is %d: %w", d.LeaseID, h.Amount-h.Drawn, d.Charged, store.ErrConflict)
		case s.positionTaken || taken[position{d.LeaseID, d.Position}]:
			results[i] = fmt.Errorf("position %d of lease %s is taken: %w", d.Position, d.LeaseID, store.ErrConflict)
		case d.Receipt != nil && s.receipt != nil && !store.SameReceipt(*s.receipt, *d.Receipt):
			results[i] = fmt.Errorf("receipt: request id holds another receipt: %w", store.ErrConflict)
		case d.Receipt != nil && len(d.Receipt.Leaf) > 0 && s.queued && !bytes.Equal(s.leaf, d.Receipt.Leaf):
			results[i] = fmt.Errorf("receipt: request id %q has another leaf queued: %w", d.CallID, store.ErrConflict)
		}
		if results[i] != nil {
			continue
		}
		h.Drawn += d.Charged
		h.DrawnCost += d.Cost
		accepted[d.CallID] = d
		taken[position{d.LeaseID, d.Position}] = true
		w.add(d, s)
	}
	return results, w
}

// drawWrite is what a batch writes: the rows of writeDraws, as arrays.
type drawWrite struct {
	receiptIDs, owners, keyIDs []string
	seqs                       []int64
	envelopes                  [][]byte
	leafIDs                    []string
	leaves                     [][]byte
	callIDs, leaseIDs          []string
	positions, charged, costs  []int64
	leases                     map[string]bool // the leases drawn on
}

// add adds the accepted draw d, whose state is s: its receipt unless kept,
// its leaf unless queued (as PutReceipt queues it whether the receipt is
// new or not), and its draw.
func (w *drawWrite) add(d store.LeaseDraw, s drawState) {
	if r := d.Receipt; r != nil {
		if s.receipt == nil {
			w.receiptIDs, w.owners, w.keyIDs = append(w.receiptIDs, r.RequestID), append(w.owners, r.Owner), append(w.keyIDs, r.KeyID)
			w.seqs, w.envelopes = append(w.seqs, r.Seq), append(w.envelopes, r.Envelope)
		}
		if len(r.Leaf) > 0 && !s.queued {
			w.leafIDs, w.leaves = append(w.leafIDs, r.RequestID), append(w.leaves, r.Leaf)
		}
	}
	w.callIDs, w.leaseIDs = append(w.callIDs, d.CallID), append(w.leaseIDs, d.LeaseID)
	w.positions, w.charged, w.costs = append(w.positions, d.Position), append(w.charged, d.Charged), append(w.costs, d.Cost)
	w.leases[d.LeaseID] = true
}

// exec writes w in tx at now: errRaced if an insert found its row taken.
func (w *drawWrite) exec(ctx context.Context, tx pgx.Tx, now *int64) error {
	var receipts, leaves, draws, leases int64
	err := tx.QueryRow(ctx, writeDraws, now,
		nonNil(w.receiptIDs), nonNil(w.owners), nonNil(w.keyIDs), nonNil(w.seqs), nonNil(w.envelopes),
		nonNil(w.leafIDs), nonNil(w.leaves),
		w.callIDs, w.leaseIDs, w.positions, w.charged, w.costs).Scan(&receipts, &leaves, &draws, &leases)
	switch {
	case err != nil:
		return fmt.Errorf("write draws: %w", err)
	case receipts != int64(len(w.receiptIDs)) || leaves != int64(len(w.leafIDs)) || draws != int64(len(w.callIDs)):
		return errRaced
	case leases != int64(len(w.leases)):
		// Each lease was locked, open and had room when decided: a bug.
		return fmt.Errorf("%d of %d leases took their draws", leases, len(w.leases))
	}
	return nil
}

// nonNil returns s, or an empty slice for nil: pgx sends a nil slice as
// NULL, and the arrays of writeDraws are read as lists.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// issueMarks raises the issued marks $2 of the leases $1, in one
// statement, in their rows of ledger_lease_marks (migration 0019), which
// exist while the leases are open. It locks those rows alone, in one order,
// so it never waits for a batch of draws, which locks the leases' rows of
// ledger_holds until its commit, and never deadlocks with another Issue. A
// lease the statement that ends it has locked is waited for: its row is
// then gone, and the mark is reported not raised. It returns, for each mark
// in order, whether its mark row exists (the lease is open) and, when not,
// the hold's lease flag and state, read without a lock, to say why.
const issueMarks = `WITH u AS MATERIALIZED (
    SELECT lease, mark, ord FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(lease, mark, ord)),
l AS MATERIALIZED (
    SELECT lease_id FROM ledger_lease_marks
    WHERE lease_id = ANY($1::text[])
    ORDER BY lease_id COLLATE "C"
    FOR UPDATE),
up AS (
    UPDATE ledger_lease_marks m SET issued = GREATEST(m.issued, x.mark)
    FROM (SELECT u.lease, max(u.mark) AS mark FROM u GROUP BY u.lease) AS x, l
    WHERE m.lease_id = x.lease AND l.lease_id = x.lease)
SELECT l.lease_id IS NOT NULL, h.hold_id IS NOT NULL, COALESCE(h.lease, 0), COALESCE(h.state, '')
FROM u LEFT JOIN l ON l.lease_id = u.lease LEFT JOIN ledger_holds h ON h.hold_id = u.lease
ORDER BY u.ord`

// Issue implements store.Leases.
func (db *DB) Issue(ctx context.Context, marks []store.LeaseMark) (_ []error, err error) {
	defer store.Wrap(&err, "postgres", "issue %d marks", len(marks))
	if err := store.ValidateMarks(marks); err != nil {
		return nil, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()

	ids, values := make([]string, len(marks)), make([]int64, len(marks))
	for i, m := range marks {
		ids[i], values[i] = m.LeaseID, m.Mark
	}
	type leaseState struct {
		open, found bool
		lease       int16
		state       string
	}
	for range ledgerAttempts {
		rows, err := db.pool.Query(ctx, issueMarks, ids, values)
		var states []leaseState
		if err == nil {
			states, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (leaseState, error) {
				var s leaseState
				err := row.Scan(&s.open, &s.found, &s.lease, &s.state)
				return s, err
			})
		}
		switch {
		case db.retry(ctx, err, "issue"):
			continue
		case err != nil:
			return nil, db.mapErr(ctx, err)
		case len(states) != len(marks):
			return nil, fmt.Errorf("%d rows for %d marks", len(states), len(marks))
		}
		results := make([]error, len(marks))
		for i, s := range states {
			id := marks[i].LeaseID
			switch {
			case s.open:
			case !s.found:
				results[i] = fmt.Errorf("lease %s: %w", id, store.ErrNotFound)
			case s.lease != 1:
				results[i] = fmt.Errorf("hold %s is not a lease: %w", id, store.ErrConflict)
			case s.state != string(store.HoldHeld):
				results[i] = fmt.Errorf("lease %s is %s: %w", id, s.state, store.ErrConflict)
			default: // ended while this statement waited for its mark
				results[i] = fmt.Errorf("lease %s has ended: %w", id, store.ErrConflict)
			}
		}
		return results, nil
	}
	return nil, fmt.Errorf("no decision after %d attempts", ledgerAttempts)
}

// CloseLease implements store.Leases: the ledger's resolution of a lease,
// which captures its draws or releases it (see resolveStmt).
func (db *DB) CloseLease(ctx context.Context, leaseID string) (_ store.Hold, _ store.Entry, err error) {
	defer store.Wrap(&err, "postgres", "close lease %q", leaseID)
	if !store.ValidID(leaseID) {
		return store.Hold{}, store.Entry{}, errors.New("invalid lease id")
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.Hold{}, store.Entry{}, err
	}
	defer cancel()

	res, err := db.resolve(ctx, db.nowArg(), leaseID, store.EntryRelease, 0, endLeases, nil)
	switch {
	case err != nil:
		return store.Hold{}, store.Entry{}, err
	case res.verdict == verdictOK:
		return res.hold, res.entry, nil
	case res.verdict == verdictAbsent:
		return store.Hold{}, store.Entry{}, store.ErrNotFound
	case res.verdict == verdictKind:
		return store.Hold{}, store.Entry{}, fmt.Errorf("hold is not a lease: %w", store.ErrConflict)
	case res.hold.State == store.HoldHeld:
		// Only an expiry leaves an open hold settled, when not yet due.
		return store.Hold{}, store.Entry{}, errors.New("the lease is open but was not ended")
	}
	// Closed before, or ended by the sweep: the same result.
	e, err := db.loadEntry(ctx, res.hold.ResolvedSeq)
	return res.hold, e, err
}

var _ store.Leases = (*DB)(nil)

// OpenLeases implements store.Leases, in one repeatable-read transaction:
// its statements share one snapshot.
func (db *DB) OpenLeases(ctx context.Context, owner, asset string) (_ store.LeaseBook, err error) {
	defer store.Wrap(&err, "postgres", "open leases of %q", owner)
	if err := store.ValidateOpenLeases(owner, asset); err != nil {
		return store.LeaseBook{}, err
	}
	ctx, cancel, err := db.gate.Op(ctx)
	if err != nil {
		return store.LeaseBook{}, err
	}
	defer cancel()
	tx, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return store.LeaseBook{}, db.mapErr(ctx, err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // read only: nothing to keep
	var book store.LeaseBook
	err = tx.QueryRow(ctx, `SELECT
  COALESCE((SELECT balance FROM ledger_balances WHERE account = $1 AND asset = $3), 0),
  COALESCE((SELECT balance FROM ledger_balances WHERE account = $2 AND asset = $3), 0)`,
		store.UserAccount(owner), store.HeldAccount(owner), asset).Scan(&book.Available, &book.Held)
	if err != nil {
		return store.LeaseBook{}, db.mapErr(ctx, err)
	}
	rows, err := tx.Query(ctx, `SELECT `+holdColumns+` FROM ledger_holds
WHERE owner = $1 AND asset = $2 AND lease = 1 AND state = 'held'
ORDER BY created_at_ms, hold_id LIMIT $3`, owner, asset, store.MaxOpenLeases)
	if err != nil {
		return store.LeaseBook{}, db.mapErr(ctx, err)
	}
	defer rows.Close()
	for rows.Next() {
		h, _, err := scanHold(rows)
		if err != nil {
			return store.LeaseBook{}, db.mapErr(ctx, err)
		}
		book.Leases = append(book.Leases, h)
	}
	if err := rows.Err(); err != nil {
		return store.LeaseBook{}, db.mapErr(ctx, err)
	}
	return book, nil
}
