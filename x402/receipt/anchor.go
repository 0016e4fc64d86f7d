package receipt

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Anchors: a gateway that anchors its receipt log writes the size and root
// hash of a checkpoint on chain from time to time, in a transaction to a tiny
// contract that emits Anchored(by, size, root), and lists what it sent at
// /log/anchors. An anchor pins the log's history at that size where the
// gateway cannot take it back: a later checkpoint that does not extend an
// anchored root is a fork, whoever is shown it. An anchor means something only
// from the sender the gateway publishes (WellKnownLog.AnchorSender), at the
// contract it publishes: anyone may call the contract.

// AnchoredSignature is the contract's event, as the ABI hashes it.
const AnchoredSignature = "Anchored(address,uint64,bytes32)"

// AnchoredTopic is the event's first topic.
var AnchoredTopic = crypto.Keccak256Hash([]byte(AnchoredSignature))

// ErrAnchor: an anchor listing or an Anchored event that does not decode.
var ErrAnchor = errors.New("receipt: bad anchor")

// Anchored is one Anchored event: Contract emitted it for By, who called
// anchor(Size, Root).
type Anchored struct {
	Contract common.Address
	By       common.Address
	Size     uint64
	Root     tlog.Hash
}

// ParseAnchored decodes an Anchored event: the event's topic, the sender and
// the size as indexed topics (an address and a uint64, left-padded with
// zeros), and the root as the 32 bytes of data. Anything else is ErrAnchor.
func ParseAnchored(l *types.Log) (Anchored, error) {
	if len(l.Topics) != 3 || l.Topics[0] != AnchoredTopic {
		return Anchored{}, fmt.Errorf("%w: not an %s event", ErrAnchor, AnchoredSignature)
	}
	by, size := l.Topics[1], l.Topics[2]
	if !allZero(by[:12]) || !allZero(size[:24]) || len(l.Data) != 32 {
		return Anchored{}, fmt.Errorf("%w: an %s event whose topics or data are not an address, a uint64 and 32 bytes", ErrAnchor, AnchoredSignature)
	}
	a := Anchored{Contract: l.Address, By: common.BytesToAddress(by[12:])}
	for _, b := range size[24:] {
		a.Size = a.Size<<8 | uint64(b)
	}
	copy(a.Root[:], l.Data)
	return a, nil
}

// AnchoredEvents returns every Anchored event in r that decodes, in the
// receipt's order, from any contract: the caller checks Contract and By.
func AnchoredEvents(r *types.Receipt) []Anchored {
	var out []Anchored
	for _, l := range r.Logs {
		if a, err := ParseAnchored(l); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// Anchor is one anchor transaction as the gateway lists it: the checkpoint
// it wrote (Size leaves with root Root), where (Network, Contract), from whom
// (Sender), and the transaction, sent at SentAt and mined in Block; Block is
// 0 while the gateway has not seen it mined. A transaction the gateway
// replaced by one with higher fees, or that never left a crashed replica, is
// listed and never mined; one of the same size then follows it.
type Anchor struct {
	Size        int64
	Root        tlog.Hash
	Network     string
	Contract    common.Address
	Sender      common.Address
	Transaction common.Hash
	SentAt      time.Time
	Block       uint64
}

// MaxAnchors bounds one page of /log/anchors.
const MaxAnchors = 100

// anchorJSON is the wire form of an Anchor: hashes and addresses as 0x hex,
// addresses EIP-55, the time in RFC 3339, the block omitted while 0.
type anchorJSON struct {
	Size        int64     `json:"size"`
	Root        string    `json:"root"`
	Network     string    `json:"network"`
	Contract    string    `json:"contract"`
	Sender      string    `json:"sender"`
	Transaction string    `json:"transaction"`
	SentAt      time.Time `json:"sentAt"`
	Block       uint64    `json:"block,omitempty"`
}

// anchorsJSON is the answer of /log/anchors.
type anchorsJSON struct {
	Anchors []anchorJSON `json:"anchors"`
}

// MarshalAnchors encodes the answer of /log/anchors: {"anchors": [...]}.
func MarshalAnchors(as []Anchor) ([]byte, error) {
	w := anchorsJSON{Anchors: make([]anchorJSON, len(as))}
	for i, a := range as {
		w.Anchors[i] = anchorJSON{Size: a.Size, Root: "0x" + hex.EncodeToString(a.Root[:]), Network: a.Network,
			Contract: a.Contract.Hex(), Sender: a.Sender.Hex(), Transaction: a.Transaction.Hex(),
			SentAt: a.SentAt.UTC(), Block: a.Block}
	}
	return x402.Marshal(w)
}

// ParseAnchors decodes the answer of /log/anchors strictly: exactly the
// fields above, at most MaxAnchors anchors, each with a positive size, a
// sentAt, an eip155 network, non-zero addresses (EIP-55 if mixed case) and hashes of
// 32 bytes in lowercase hex. Anything else is ErrAnchor.
func ParseAnchors(b []byte) ([]Anchor, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrAnchor, fmt.Sprintf(format, args...))
	}
	if err := x402.CheckStrictJSON(b); err != nil {
		return nil, bad("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w anchorsJSON
	if err := dec.Decode(&w); err != nil || w.Anchors == nil {
		return nil, bad("not {anchors: [{size, root, network, contract, sender, transaction, sentAt, block}]}")
	}
	if len(w.Anchors) > MaxAnchors {
		return nil, bad("%d anchors, over %d", len(w.Anchors), MaxAnchors)
	}
	out := make([]Anchor, len(w.Anchors))
	for i, a := range w.Anchors {
		var err error
		out[i], err = a.parse()
		if err != nil {
			return nil, bad("anchor %d: %v", i, err)
		}
	}
	return out, nil
}

func (w anchorJSON) parse() (Anchor, error) {
	a := Anchor{Size: w.Size, Network: w.Network, SentAt: w.SentAt, Block: w.Block}
	if w.Size <= 0 {
		return Anchor{}, fmt.Errorf("size %d is not positive", w.Size)
	}
	if w.Block > math.MaxInt64 {
		return Anchor{}, fmt.Errorf("block %d is out of range", w.Block)
	}
	if w.SentAt.IsZero() {
		return Anchor{}, errors.New("no sentAt")
	}
	if _, err := exact.ChainID(w.Network); err != nil {
		return Anchor{}, err
	}
	if err := parseHash32(w.Root, a.Root[:]); err != nil {
		return Anchor{}, fmt.Errorf("root: %w", err)
	}
	if err := parseHash32(w.Transaction, a.Transaction[:]); err != nil {
		return Anchor{}, fmt.Errorf("transaction: %w", err)
	}
	var err error
	if a.Contract, err = nonZeroAddress(w.Contract); err != nil {
		return Anchor{}, fmt.Errorf("contract: %w", err)
	}
	if a.Sender, err = nonZeroAddress(w.Sender); err != nil {
		return Anchor{}, fmt.Errorf("sender: %w", err)
	}
	return a, nil
}

// parseHash32 decodes "0x" and 64 lowercase hex digits into out.
func parseHash32(s string, out []byte) error {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok || len(h) != 64 || strings.ToLower(h) != h {
		return errors.New("not 0x and 64 lowercase hex digits")
	}
	if _, err := hex.Decode(out, []byte(h)); err != nil {
		return errors.New("not 0x and 64 lowercase hex digits")
	}
	return nil
}

// nonZeroAddress parses an address (exact.ParseAddress) that is not zero.
func nonZeroAddress(s string) (common.Address, error) {
	a, err := exact.ParseAddress(s)
	if err != nil {
		return common.Address{}, err
	}
	if a == (common.Address{}) {
		return common.Address{}, errors.New("the zero address")
	}
	return a, nil
}
