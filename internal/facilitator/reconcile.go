package facilitator

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// Reconcile resolves the unresolved settlement records of its network from
// the chain (another chain's facilitator sharing the store resolves that
// chain's): a broadcast whose outcome was never recorded (a crash, a settle
// that answered pending), or a claim whose holder died. It never signs
// anything new for a record: a transaction still unmined stays as it is,
// except that the very bytes the record holds are sent again when the node
// dropped them (and our own Sender replaces its own stuck ones, recording
// them first). A claim whose lease ran out is released: with every
// transaction recorded before it is sent, a record still in StateClaimed
// sent nothing. It reports success to nobody (D5: that is for the first
// settle call that observes it). Then it looks for reorgs in the
// settlements of its network younger than Config.ReorgWindow
// (checkReorgs), which changes no answer given or to be given. It returns
// how many records reached a final state, were given back, or had their
// reorg mark changed.
func (f *Facilitator) Reconcile(ctx context.Context) (int, error) {
	n, err := f.reconcile(ctx)
	f.metrics.reconciled.WithLabelValues("resolved").Add(float64(n))
	if err != nil {
		f.metrics.reconciled.WithLabelValues("failed_rounds").Inc()
	}
	return n, err
}

func (f *Facilitator) reconcile(ctx context.Context) (int, error) {
	// Only this network's records: with one facilitator per chain on a
	// shared store, the oldest records of every network could all be
	// another chain's (its node down for a while), and ours would never
	// come up.
	recs, err := f.store.UnresolvedSettlements(ctx, f.cfg.Network, 100)
	if err != nil {
		return 0, fmt.Errorf("reconcile: %w", err)
	}
	done := 0
	var errs []error
	for _, rec := range recs {
		if err := f.ownNetwork(rec); err != nil {
			errs = append(errs, err)
			continue
		}
		pm, err := recordToPayment(rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch rec.State {
		case store.StateBroadcast:
			resp, err := f.resolve(ctx, pm, rec, false)
			if errors.Is(err, errAbandoned) {
				done++
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if resp.ErrorReason != x402.ReasonSettlementPending {
				done++
			}
		case store.StateClaimed:
			if time.Now().Before(rec.LeaseUntil) {
				continue
			}
			used, err := pm.used(ctx, f.backend)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !used {
				// Nothing was mined for it: give the authorization back.
				f.release(ctx, rec)
				done++
				continue
			}
			if _, err := f.resolve(ctx, pm, rec, false); err != nil {
				errs = append(errs, err)
				continue
			}
			done++
		case store.StateSettled, store.StateFailed:
			// Final already: UnresolvedSettlements does not return these.
		}
	}
	n, err := f.checkReorgs(ctx)
	return done + n, errors.Join(append(errs, err)...)
}

// ownNetwork checks that a record the store listed for this facilitator's
// network is of it. Resolving another chain's record against this chain
// would read its authorization as unused here and give it back while its
// transaction may still be mined there.
func (f *Facilitator) ownNetwork(rec store.Settlement) error {
	if rec.Network != f.cfg.Network {
		return fmt.Errorf("settlement %s of network %s was listed for %s; left alone", rec.Key, rec.Network, f.cfg.Network)
	}
	return nil
}

// recordToPayment rebuilds what resolve needs from a stored record. An upto
// permit's key names Permit2 where an exact authorization's names its token.
func recordToPayment(rec store.Settlement) (payment, error) {
	if network, owner, nonce, err := upto.ParseKey(rec.Key); err == nil {
		amount, err := exact.ParseUint256(rec.Amount)
		if err != nil {
			return nil, fmt.Errorf("settlement %s amount: %w", rec.Key, err)
		}
		asset, payTo := common.HexToAddress(rec.Asset), common.HexToAddress(rec.PayTo)
		return uptoPayment{&upto.Verified{
			Network: network, Asset: asset, PayTo: payTo, Amount: amount,
			Payload: &upto.Payload{Authorization: upto.Authorization{
				From: owner, Nonce: nonce, Spender: upto.ProxyAddress,
				Permitted: upto.TokenPermissions{Token: asset, Amount: amount},
				Deadline:  new(big.Int), Witness: upto.Witness{To: payTo, ValidAfter: new(big.Int)},
			}},
		}}, nil
	}
	parts := strings.Split(rec.Key, "/")
	if len(parts) != 4 {
		return nil, fmt.Errorf("settlement key %q is malformed", rec.Key)
	}
	value, err := exact.ParseUint256(rec.Amount)
	if err != nil {
		return nil, fmt.Errorf("settlement %s amount: %w", rec.Key, err)
	}
	return exactPayment{&exact.Verified{
		Network: rec.Network,
		Asset:   common.HexToAddress(parts[1]),
		PayTo:   common.HexToAddress(rec.PayTo),
		Payload: &exact.Payload{Authorization: exact.Authorization{
			From: common.HexToAddress(parts[2]), To: common.HexToAddress(rec.PayTo), Value: value,
			ValidAfter: new(big.Int), ValidBefore: new(big.Int), Nonce: common.HexToHash(parts[3]),
		}},
	}}, nil
}

// Reconciler runs Reconcile at start and then periodically until Close.
type Reconciler struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

// StartReconciler starts the loop. Errors are logged, never fatal.
func (f *Facilitator) StartReconciler(every time.Duration) *Reconciler {
	r := &Reconciler{stop: make(chan struct{})}
	r.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), every+30*time.Second)
			n, err := f.Reconcile(ctx)
			cancel()
			if err != nil {
				f.log.Warn("reconcile", "err", err)
			} else if n > 0 {
				f.log.Info("reconciled settlements", "resolved", n)
			}
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	})
	return r
}

// Close stops the loop and waits for it.
func (r *Reconciler) Close() {
	close(r.stop)
	r.wg.Wait()
}
