package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Receipts for every paid call (D18, D30): a credit-paid call's (credits.go)
// and an x402 payment's (x402Receipt). Both are signed with the receipt key,
// carry a fresh salt and the log's promise (logBy), and are kept with their
// leaf in one store write before the answer that carries them is sent, so
// that the log can include every receipt a buyer holds.

// receiptWriteTimeout bounds the write that keeps a receipt. It does not
// follow the request's context: a receipt issued is kept even if the
// client left.
const receiptWriteTimeout = 5 * time.Second

// signed fills r's salt and logBy, signs it, and returns the signed receipt.
func (s *Server) signed(r receipt.Receipt, issued time.Time) (*receipt.Receipt, []byte, error) {
	if s.cfg.Log != nil {
		r.LogBy = s.cfg.Log.LogBy(issued)
	}
	_, _ = rand.Read(r.Salt[:]) // never fails (crypto/rand)
	sr, err := s.cfg.Credits.Signer.Sign(r)
	if err != nil {
		return nil, nil, err
	}
	return &sr.Receipt, sr.Signature, nil
}

// keepReceipt stores rec, whose envelope is the signed r, with r's leaf when
// the gateway keeps a log. It returns the envelope now kept under rec's
// request id: rec's, or the one a put before this one kept (a replay's
// answer carries the receipt first issued for its payment).
func (s *Server) keepReceipt(ctx context.Context, r *receipt.Receipt, rec store.StoredReceipt) ([]byte, error) {
	rs := s.cfg.Credits.Receipts
	if rs == nil {
		return rec.Envelope, nil
	}
	rec, err := s.receiptRecord(r, rec)
	if err != nil {
		return rec.Envelope, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiptWriteTimeout)
	defer cancel()
	start := s.now()
	err = rs.PutReceipt(ctx, rec)
	s.metrics.ledgerLatency("receipt", s.now().Sub(start))
	if !errors.Is(err, store.ErrConflict) {
		return rec.Envelope, err
	}
	kept, err := rs.Receipt(ctx, rec.RequestID)
	if err != nil {
		return rec.Envelope, err
	}
	return kept.Envelope, nil
}

// receiptRecord returns rec with the leaf of r in the receipt log when the
// log is on.
func (s *Server) receiptRecord(r *receipt.Receipt, rec store.StoredReceipt) (store.StoredReceipt, error) {
	if s.cfg.Log == nil {
		return rec, nil
	}
	leaf, err := receipt.NewLeaf(s.cfg.Credits.Signer.Domain(), r)
	if err != nil { // cannot happen: r was just signed
		return rec, err
	}
	rec.Leaf = leaf.Marshal()
	return rec, nil
}

// x402ReceiptID names the receipt of the x402 payment whose claim key (D4)
// is key: one receipt per payment, whichever replay asks for it.
func x402ReceiptID(key string) string {
	return crypto.Keccak256Hash([]byte("llm4agents x402 receipt\n" + key)).Hex()
}

// x402Receipt returns the envelope of the receipt of the x402 payment q
// was paid with (q.payKey; q.payUpto for upto), for an answer that
// reports usage u and costs ci: the receipt kept for that payment if there
// is one, else a new one, kept before it is returned. nil when the gateway
// issues no receipts, or when the receipt cannot be signed; a receipt
// signed but not kept is still returned, as a credit call's is.
func (s *Server) x402Receipt(ctx context.Context, q *quote, u *chat.Usage, ci costInfo) json.RawMessage {
	c := s.cfg.Credits
	if c == nil || c.Signer == nil || q.payKey == "" {
		return nil
	}
	amount, ok := new(big.Int).SetString(ci.Charged, 10)
	if !ok {
		s.log.Error("x402 receipt: unreadable charge", "key", q.payKey, "charged", ci.Charged)
		return nil
	}
	var in, out int64
	if u != nil {
		in, out = u.PromptTokens, u.CompletionTokens
	}
	rail := receipt.RailExact
	if q.payUpto {
		rail = receipt.RailUpto
	}
	return s.paymentReceipt(ctx, q.payKey, receipt.Receipt{
		Model: q.model.ID, InputTokens: big.NewInt(in), OutputTokens: big.NewInt(out), Amount: amount,
		BalanceAfter: new(big.Int), LedgerSeq: new(big.Int), Rail: rail,
	})
}

// topUpReceipt returns the envelope of the receipt of the top-up paid with
// the payment whose claim key is key: amount credited to the account, whose
// balance was then balance, at ledger entry seq. The receipt names the
// model receipt.ModelTopUp and no tokens. nil as x402Receipt's.
func (s *Server) topUpReceipt(ctx context.Context, key string, amount *big.Int, balance, seq int64) json.RawMessage {
	c := s.cfg.Credits
	if c == nil || c.Signer == nil {
		return nil
	}
	return s.paymentReceipt(ctx, key, receipt.Receipt{
		Model: receipt.ModelTopUp, InputTokens: new(big.Int), OutputTokens: new(big.Int), Amount: amount,
		BalanceAfter: big.NewInt(balance), LedgerSeq: big.NewInt(seq), Rail: receipt.RailExact,
	})
}

// paymentReceipt signs r, the receipt of the x402 payment whose claim key
// is key (its request id, account, network and payment are the key's), and
// keeps it: one receipt per payment, whichever presentation of it asks.
func (s *Server) paymentReceipt(ctx context.Context, key string, r receipt.Receipt) json.RawMessage {
	network, _, payer, nonce, err := exact.ParseKey(key) // upto's keys have the same shape
	if err != nil || !s.paysOn(network) {
		s.log.Error("payment receipt: unreadable payment", "key", key, "err", err)
		return nil
	}
	id := x402ReceiptID(key)
	issued := s.now()
	r.RequestID, r.Account, r.Network, r.Payment = common.HexToHash(id), payer, network, nonce
	r.IssuedAt = uint64(max(issued.Unix(), 0)) // #nosec G115 -- clamped at zero
	signed, sig, err := s.signed(r, issued)
	if err != nil {
		s.log.Error("payment receipt: sign", "key", key, "err", err)
		return nil
	}
	env, err := receipt.EncodeEnvelope(signed, sig)
	if err != nil {
		s.log.Error("payment receipt: encode", "key", key, "err", err)
		return nil
	}
	kept, err := s.keepReceipt(ctx, signed, store.StoredReceipt{RequestID: id, Owner: strings.ToLower(payer.Hex()), Envelope: env})
	if err != nil {
		s.metrics.payment("receipt_not_kept")
		s.log.Error("payment receipt: keep", "key", key, "err", err)
	}
	return kept
}

// receiptHeader is the X-Llm4agents-Receipt value of an envelope.
func receiptHeader(env []byte) string { return base64.StdEncoding.EncodeToString(env) }
