package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/ethereum/go-ethereum/common"
	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// WellKnownPath is where a gateway publishes its receipt signer and domain.
const WellKnownPath = "/.well-known/llm4agents.json"

// ErrBadWellKnown: the well-known document could not be fetched or does not
// decode strictly.
var ErrBadWellKnown = errors.New("client: bad " + WellKnownPath)

// WellKnown is the document at WellKnownPath:
//
//	{"receipts": {"signer": "0x…", "domain": {"name": "llm4agents", "version": "1", "chainId": 8453}}}
//
// The receipts object is decoded strictly: exactly these fields, once each,
// a signer address (EIP-55 if mixed case), a non-empty name and version, and
// chainId a positive integer JSON number. Other top-level members are allowed
// and ignored, so the document can grow without breaking buyers.
type WellKnown struct {
	Receipts WellKnownReceipts `json:"receipts"`
	// Log, when the gateway keeps a receipt log (docs/DESIGN.md D30), says where and under
	// which key: {"origin", "key", "maxMergeDelayMs"}, and, when it anchors
	// the log on chain, {"network", "anchorContract", "anchorSender"}.
	Log *WellKnownLog `json:"log,omitempty"`
}

// WellKnownLog names the gateway's receipt log: its origin (the first line
// of its checkpoints), its checkpoint key as a signed-note verifier key
// ("<origin>+<hash>+<base64>"), and its promise, the longest delay between
// a receipt's issue and its inclusion, in milliseconds. The log is served
// under /log/ of the same origin.
//
// A gateway that anchors its checkpoints on chain also names where: the
// network (CAIP-2), the anchor contract and the address that sends the
// anchors ({"network", "anchorContract", "anchorSender"}: all three or none),
// and, when several replicas anchor with signers of their own, every sender
// ("anchorSenders", anchorSender included). Only anchors from those senders
// at that contract are the gateway's.
type WellKnownLog struct {
	Origin          string
	Key             string
	MaxMergeDelayMs uint64

	// Network, AnchorContract and AnchorSender are set when the log is
	// anchored; all zero when it is not.
	Network        string
	AnchorContract common.Address
	AnchorSender   common.Address
	// AnchorSenders are the other addresses whose anchors are the gateway's
	// too: every replica anchors with its own signer. Empty when the
	// gateway anchors from AnchorSender alone.
	AnchorSenders []common.Address
}

// MaxAnchorSenders bounds the senders a well-known document publishes.
const MaxAnchorSenders = 32

// IsAnchorSender reports whether an anchor sent by a is the gateway's.
func (l WellKnownLog) IsAnchorSender(a common.Address) bool {
	return l.Anchored() && (a == l.AnchorSender || slices.Contains(l.AnchorSenders, a))
}

// Senders returns every address whose anchors are the gateway's:
// AnchorSender first.
func (l WellKnownLog) Senders() []common.Address {
	out := []common.Address{l.AnchorSender}
	for _, a := range l.AnchorSenders {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// wellKnownLogJSON is the wire form of a WellKnownLog.
type wellKnownLogJSON struct {
	Origin          string `json:"origin"`
	Key             string `json:"key"`
	MaxMergeDelayMs uint64 `json:"maxMergeDelayMs"`
	Network         string `json:"network,omitempty"`
	AnchorContract  string `json:"anchorContract,omitempty"`
	AnchorSender    string `json:"anchorSender,omitempty"`
	// AnchorSenders lists every sender, anchorSender included; omitted when
	// there is no other.
	AnchorSenders []string `json:"anchorSenders,omitempty"`
}

// Anchored reports whether the log is anchored on chain.
func (l WellKnownLog) Anchored() bool { return l.Network != "" }

// MarshalJSON encodes the wire form, addresses with their EIP-55 checksum.
func (l WellKnownLog) MarshalJSON() ([]byte, error) {
	w := wellKnownLogJSON{Origin: l.Origin, Key: l.Key, MaxMergeDelayMs: l.MaxMergeDelayMs}
	if l.Anchored() {
		w.Network, w.AnchorContract, w.AnchorSender = l.Network, l.AnchorContract.Hex(), l.AnchorSender.Hex()
		if senders := l.Senders(); len(senders) > 1 {
			for _, a := range senders {
				w.AnchorSenders = append(w.AnchorSenders, a.Hex())
			}
		}
	}
	return json.Marshal(w)
}

// parseWellKnownLog decodes the log member strictly.
func parseWellKnownLog(raw json.RawMessage) (*WellKnownLog, error) {
	var w wellKnownLogJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: log is not {origin, key, maxMergeDelayMs[, network, anchorContract, anchorSender[, anchorSenders]]}", ErrBadWellKnown)
	}
	l := &WellKnownLog{Origin: w.Origin, Key: w.Key, MaxMergeDelayMs: w.MaxMergeDelayMs}
	if _, err := l.Verifier(); err != nil {
		return nil, err
	}
	if l.MaxMergeDelayMs == 0 {
		return nil, fmt.Errorf("%w: log.maxMergeDelayMs is missing or zero", ErrBadWellKnown)
	}
	switch {
	case w.Network == "" && w.AnchorContract == "" && w.AnchorSender == "":
		return l, nil
	case w.Network == "" || w.AnchorContract == "" || w.AnchorSender == "":
		return nil, fmt.Errorf("%w: log has some of network, anchorContract and anchorSender, not all three", ErrBadWellKnown)
	}
	if _, err := exact.ChainID(w.Network); err != nil {
		return nil, fmt.Errorf("%w: log.network: %w", ErrBadWellKnown, err)
	}
	var err error
	if l.AnchorContract, err = nonZeroAddress(w.AnchorContract); err != nil {
		return nil, fmt.Errorf("%w: log.anchorContract: %w", ErrBadWellKnown, err)
	}
	if l.AnchorSender, err = nonZeroAddress(w.AnchorSender); err != nil {
		return nil, fmt.Errorf("%w: log.anchorSender: %w", ErrBadWellKnown, err)
	}
	if len(w.AnchorSenders) > MaxAnchorSenders {
		return nil, fmt.Errorf("%w: log.anchorSenders lists %d senders, more than %d", ErrBadWellKnown, len(w.AnchorSenders), MaxAnchorSenders)
	}
	for i, text := range w.AnchorSenders {
		a, err := nonZeroAddress(text)
		if err != nil {
			return nil, fmt.Errorf("%w: log.anchorSenders[%d]: %w", ErrBadWellKnown, i, err)
		}
		if slices.Contains(l.AnchorSenders, a) {
			return nil, fmt.Errorf("%w: log.anchorSenders lists %s twice", ErrBadWellKnown, a.Hex())
		}
		l.AnchorSenders = append(l.AnchorSenders, a)
	}
	if len(l.AnchorSenders) > 0 && !slices.Contains(l.AnchorSenders, l.AnchorSender) {
		return nil, fmt.Errorf("%w: log.anchorSenders does not list anchorSender", ErrBadWellKnown)
	}
	l.Network = w.Network
	return l, nil
}

// Verifier returns the log's checkpoint key, checked: a signed-note
// verifier key named for the log's origin.
func (l WellKnownLog) Verifier() (note.Verifier, error) {
	v, err := note.NewVerifier(l.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: log.key is not a signed-note verifier key", ErrBadWellKnown)
	}
	if v.Name() != l.Origin || l.Origin == "" {
		return nil, fmt.Errorf("%w: log.key is named %q, not the log's origin %q", ErrBadWellKnown, v.Name(), l.Origin)
	}
	return v, nil
}

// WellKnownReceipts says who signs the receipts and in which EIP-712 domain.
type WellKnownReceipts struct {
	Signer common.Address `json:"signer"`
	Domain Domain         `json:"domain"`
}

// MarshalJSON encodes the signer with its EIP-55 checksum.
func (w WellKnownReceipts) MarshalJSON() ([]byte, error) {
	type domain Domain
	return json.Marshal(struct {
		Signer string `json:"signer"`
		Domain domain `json:"domain"`
	}{w.Signer.Hex(), domain(w.Domain)})
}

// UnmarshalJSON decodes strictly, as ParseWellKnown.
func (w *WellKnown) UnmarshalJSON(b []byte) error {
	p, err := ParseWellKnown(b)
	if err != nil {
		return err
	}
	*w = *p
	return nil
}

// ParseWellKnown decodes a well-known document strictly (see WellKnown).
func ParseWellKnown(b []byte) (*WellKnown, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadWellKnown, fmt.Sprintf(format, args...))
	}
	if err := x402.CheckStrictJSON(b); err != nil {
		return nil, bad("%v", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil || top == nil {
		return nil, bad("not a JSON object")
	}
	rawReceipts, ok := top["receipts"]
	if !ok {
		return nil, bad("no receipts member")
	}
	var w struct {
		Signer *string `json:"signer"`
		Domain *struct {
			Name    *string         `json:"name"`
			Version *string         `json:"version"`
			ChainID json.RawMessage `json:"chainId"`
		} `json:"domain"`
	}
	dec := json.NewDecoder(bytes.NewReader(rawReceipts))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, bad("receipts is not {signer, domain{name, version, chainId}}")
	}
	if w.Signer == nil || w.Domain == nil || w.Domain.Name == nil || w.Domain.Version == nil || w.Domain.ChainID == nil {
		return nil, bad("receipts lacks signer, domain.name, domain.version or domain.chainId")
	}
	signer, err := exact.ParseAddress(*w.Signer)
	if err != nil {
		return nil, bad("signer: %v", err)
	}
	if signer == (common.Address{}) {
		return nil, bad("signer is the zero address")
	}
	if *w.Domain.Name == "" || *w.Domain.Version == "" {
		return nil, bad("domain name and version must not be empty")
	}
	// A JSON number in canonical decimal: not a string, fraction or exponent.
	chainID, err := exact.ParseUint256(string(w.Domain.ChainID))
	if err != nil || chainID.Sign() == 0 {
		return nil, bad("domain.chainId is not a positive integer")
	}
	doc := &WellKnown{Receipts: WellKnownReceipts{
		Signer: signer,
		Domain: Domain{Name: *w.Domain.Name, Version: *w.Domain.Version, ChainID: chainID},
	}}
	if rawLog, ok := top["log"]; ok {
		if doc.Log, err = parseWellKnownLog(rawLog); err != nil {
			return nil, err
		}
	}
	return doc, nil
}
