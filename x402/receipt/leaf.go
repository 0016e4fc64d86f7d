package receipt

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// A leaf is what the gateway's public receipt log holds for one receipt
// (docs/DESIGN.md D30): the receipt's public part, which an auditor may add up, and a
// commitment to the whole receipt, which only its holder can open. It is
// text, one field per line, in this order and nothing else:
//
//	llm4agents receipt v1
//	rail exact
//	model gpt-4o-mini
//	tokens 1234 567
//	amount 10000
//	issued 1800000000
//	commitment 0x<the receipt's EIP-712 digest>
//
// The payer, the key, the request id, the balance, the ledger entry and the
// payment's nonce are not in it. The commitment is the receipt's digest,
// which covers them and the receipt's random salt: without the receipt, the
// digest cannot be tested against a guess of its fields.

// leafHeader is a leaf's first line, with its newline.
const leafHeader = "llm4agents receipt v1\n"

// ErrLeaf: a leaf that does not parse, or that is not the given receipt's.
var ErrLeaf = errors.New("receipt: bad leaf")

// Leaf is the public part of a receipt, as its log leaf carries it.
type Leaf struct {
	Rail         string
	Model        string
	InputTokens  *big.Int
	OutputTokens *big.Int
	Amount       *big.Int
	IssuedAt     uint64
	// Commitment is the receipt's EIP-712 digest (Digest).
	Commitment common.Hash
}

// NewLeaf returns the leaf of r signed in d.
func NewLeaf(d Domain, r *Receipt) (Leaf, error) {
	digest, err := Digest(d, r)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{Rail: r.Rail, Model: r.Model, InputTokens: r.InputTokens, OutputTokens: r.OutputTokens,
		Amount: r.Amount, IssuedAt: r.IssuedAt, Commitment: digest}, nil
}

// Marshal returns the leaf's bytes, as the log hashes them.
func (l Leaf) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(leafHeader)
	fmt.Fprintf(&b, "rail %s\nmodel %s\ntokens %s %s\namount %s\nissued %d\ncommitment %s\n",
		l.Rail, l.Model, l.InputTokens, l.OutputTokens, l.Amount, l.IssuedAt, l.Commitment.Hex())
	return b.Bytes()
}

// ParseLeaf decodes a leaf strictly: the seven lines in order, canonical
// decimals, a lowercase 0x-hex commitment, nothing else. What it accepts,
// Marshal gives back byte for byte.
func ParseLeaf(b []byte) (Leaf, error) {
	bad := func(format string, args ...any) (Leaf, error) {
		return Leaf{}, fmt.Errorf("%w: %s", ErrLeaf, fmt.Sprintf(format, args...))
	}
	s, ok := strings.CutPrefix(string(b), leafHeader)
	if !ok {
		return bad("does not start with %q", strings.TrimSpace(leafHeader))
	}
	lines := strings.Split(s, "\n")
	if len(lines) != 7 || lines[6] != "" {
		return bad("is not seven lines, each ended by a newline")
	}
	names := []string{"rail", "model", "tokens", "amount", "issued", "commitment"}
	vals := make([]string, len(names))
	for i, name := range names {
		v, ok := strings.CutPrefix(lines[i], name+" ")
		if !ok {
			return bad("line %d is not %q", i+2, name)
		}
		vals[i] = v
	}
	var l Leaf
	var err error
	l.Rail, l.Model = vals[0], vals[1]
	if l.Rail != RailCredits && l.Rail != RailExact && l.Rail != RailUpto {
		return bad("unknown rail")
	}
	if l.Model == "" || !printable(l.Model) {
		return bad("model is empty or not printable UTF-8 without spaces")
	}
	in, out, ok := strings.Cut(vals[2], " ")
	if !ok {
		return bad("tokens is not two numbers")
	}
	for _, f := range []struct {
		dst **big.Int
		s   string
	}{{&l.InputTokens, in}, {&l.OutputTokens, out}, {&l.Amount, vals[3]}} {
		if *f.dst, err = exact.ParseUint256(f.s); err != nil {
			return bad("%v", err)
		}
	}
	if l.IssuedAt, err = strconv.ParseUint(vals[4], 10, 64); err != nil || strconv.FormatUint(l.IssuedAt, 10) != vals[4] {
		return bad("issued is not a canonical unix time")
	}
	if l.Commitment, err = parseBytes32(vals[5]); err != nil || l.Commitment.Hex() != vals[5] {
		return bad("commitment is not 0x and 64 lowercase hex digits")
	}
	return l, nil
}

// Check reports whether l is the leaf of r signed in d: the same public
// fields, and a commitment that is r's digest.
func (l Leaf) Check(d Domain, r *Receipt) error {
	want, err := NewLeaf(d, r)
	if err != nil {
		return err
	}
	if !bytes.Equal(l.Marshal(), want.Marshal()) {
		return fmt.Errorf("%w: the log's leaf is not this receipt's", ErrLeaf)
	}
	return nil
}
