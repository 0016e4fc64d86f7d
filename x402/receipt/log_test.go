package receipt_test

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/llm4agents/llm4agents/x402/receipt"
)

// memLog is a log of leaves kept in memory, built with tlog as the gateway's
// integrator builds it, to check what a verifier accepts.
type memLog struct {
	hashes []tlog.Hash
	leaves [][]byte
}

func (m *memLog) ReadHashes(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		if x >= int64(len(m.hashes)) {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = m.hashes[x]
	}
	return out, nil
}

func (m *memLog) add(tb testing.TB, leaf []byte) int64 {
	tb.Helper()
	n := int64(len(m.leaves))
	hs, err := tlog.StoredHashes(n, leaf, m)
	if err != nil {
		tb.Fatal(err)
	}
	m.hashes = append(m.hashes, hs...)
	m.leaves = append(m.leaves, leaf)
	return n
}

func (m *memLog) checkpoint(tb testing.TB, origin string) receipt.Checkpoint {
	tb.Helper()
	n := int64(len(m.leaves))
	root, err := tlog.TreeHash(n, m)
	if err != nil {
		tb.Fatal(err)
	}
	return receipt.Checkpoint{Origin: origin, Size: n, Root: root}
}

func newLogKey(tb testing.TB, origin string) (note.Signer, note.Verifier) {
	tb.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		tb.Fatal(err)
	}
	return s, v
}

func sign(tb testing.TB, s note.Signer, c receipt.Checkpoint) []byte {
	tb.Helper()
	b, err := note.Sign(&note.Note{Text: c.Text()}, s)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestInclusion: a receipt's proof verifies against a signed checkpoint, and
// every tampering a buyer can be shown is refused with the error that names
// it.
func TestInclusion(t *testing.T) {
	const origin = "gateway.example/receipts"
	s, v := newLogKey(t, origin)
	d := receipt.NewDomain(big.NewInt(8453))
	var m memLog
	var mine *receipt.Receipt
	var index int64
	for i := range 37 {
		r := testReceipt()
		r.Salt[0], r.IssuedAt = byte(i), r.IssuedAt+uint64(i)
		l, err := receipt.NewLeaf(d, r)
		if err != nil {
			t.Fatal(err)
		}
		if n := m.add(t, l.Marshal()); i == 21 {
			mine, index = r, n
		}
	}
	c := m.checkpoint(t, origin)
	hashes, err := tlog.ProveRecord(c.Size, index, &m)
	if err != nil {
		t.Fatal(err)
	}
	good := receipt.Proof{Index: index, Leaf: m.leaves[index], Checkpoint: sign(t, s, c), Hashes: hashes}
	wire, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	var p receipt.Proof
	if err := json.Unmarshal(wire, &p); err != nil {
		t.Fatal(err)
	}
	got, err := receipt.VerifyInclusion(&p, v, d, mine)
	if err != nil || got != c {
		t.Fatalf("VerifyInclusion = %+v, %v; want %+v", got, err, c)
	}

	other := *mine
	other.Amount = big.NewInt(1)
	_, otherKey := newLogKey(t, origin)
	otherOrigin, otherOriginKey := newLogKey(t, "elsewhere.example/receipts")
	smaller := c
	smaller.Size = index
	for name, tc := range map[string]struct {
		p    func(p receipt.Proof) receipt.Proof
		r    *receipt.Receipt
		key  note.Verifier
		want error
	}{
		"a tampered receipt": {r: &other, want: receipt.ErrLeaf},
		"a proof for another leaf": {p: func(p receipt.Proof) receipt.Proof {
			p.Index--
			p.Leaf = m.leaves[p.Index]
			return p
		}, want: receipt.ErrLeaf},
		"another index":         {p: func(p receipt.Proof) receipt.Proof { p.Index--; return p }, want: receipt.ErrProof},
		"an index past the log": {p: func(p receipt.Proof) receipt.Proof { p.Index = c.Size; return p }, want: receipt.ErrProof},
		"a hash flipped": {p: func(p receipt.Proof) receipt.Proof {
			p.Hashes = append(tlog.RecordProof(nil), p.Hashes...)
			p.Hashes[2][0] ^= 1
			return p
		}, want: receipt.ErrProof},
		"a hash missing":        {p: func(p receipt.Proof) receipt.Proof { p.Hashes = p.Hashes[1:]; return p }, want: receipt.ErrProof},
		"signed by another key": {key: otherKey, want: receipt.ErrCheckpoint},
		"another log's checkpoint": {p: func(p receipt.Proof) receipt.Proof {
			p.Checkpoint = sign(t, otherOrigin, receipt.Checkpoint{Origin: origin, Size: c.Size, Root: c.Root})
			return p
		}, key: otherOriginKey, want: receipt.ErrCheckpoint},
		"a checkpoint edited after signing": {p: func(p receipt.Proof) receipt.Proof {
			p.Checkpoint = []byte(strings.Replace(string(p.Checkpoint), fmt.Sprintf("\n%d\n", c.Size), fmt.Sprintf("\n%d\n", c.Size+1), 1))
			return p
		}, want: receipt.ErrCheckpoint},
		"a checkpoint of a smaller log": {p: func(p receipt.Proof) receipt.Proof {
			p.Checkpoint = sign(t, s, smaller)
			return p
		}, want: receipt.ErrProof},
	} {
		t.Run(name, func(t *testing.T) {
			p := good
			if tc.p != nil {
				p = tc.p(p)
			}
			r, key := mine, v
			if tc.r != nil {
				r = tc.r
			}
			if tc.key != nil {
				key = tc.key
			}
			if _, err := receipt.VerifyInclusion(&p, key, d, r); !errors.Is(err, tc.want) {
				t.Errorf("VerifyInclusion = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestConsistency: a later checkpoint extends an earlier one by a tlog
// proof; two checkpoints of one size with different roots, or a later one
// that rewrote history, are a fork.
func TestConsistency(t *testing.T) {
	const origin = "gateway.example/receipts"
	var m, fork memLog
	for i := range 20 {
		m.add(t, []byte(fmt.Sprintf("leaf %d", i)))
		if i < 9 {
			fork.add(t, []byte(fmt.Sprintf("leaf %d", i)))
		} else {
			fork.add(t, []byte(fmt.Sprintf("other leaf %d", i)))
		}
	}
	old := receipt.Checkpoint{Origin: origin, Size: 11}
	var err error
	if old.Root, err = tlog.TreeHash(11, &m); err != nil {
		t.Fatal(err)
	}
	cur := m.checkpoint(t, origin)
	proof, err := tlog.ProveTree(cur.Size, old.Size, &m)
	if err != nil {
		t.Fatal(err)
	}
	if err := receipt.CheckConsistency(old, cur, proof); err != nil {
		t.Errorf("an honest log: %v", err)
	}
	if err := receipt.CheckConsistency(cur, old, proof); err != nil {
		t.Errorf("an honest log, checkpoints swapped: %v", err)
	}
	forked := fork.checkpoint(t, origin)
	if err := receipt.SameLog(cur, forked); !errors.Is(err, receipt.ErrFork) {
		t.Errorf("two roots of size %d: %v, want ErrFork", cur.Size, err)
	}
	forkProof, err := tlog.ProveTree(forked.Size, old.Size, &fork)
	if err != nil {
		t.Fatal(err)
	}
	if err := receipt.CheckConsistency(old, forked, forkProof); !errors.Is(err, receipt.ErrFork) {
		t.Errorf("a log that rewrote leaf 9: %v, want ErrFork", err)
	}
	if err := receipt.SameLog(old, receipt.Checkpoint{Origin: "other", Size: 11, Root: old.Root}); !errors.Is(err, receipt.ErrCheckpoint) {
		t.Errorf("checkpoints of two logs: %v", err)
	}
}

func TestParseCheckpoint(t *testing.T) {
	c := receipt.Checkpoint{Origin: "gateway.example/receipts", Size: 12345}
	c.Root[0] = 7
	got, err := receipt.ParseCheckpoint(c.Text())
	if err != nil || got != c {
		t.Fatalf("ParseCheckpoint(Text) = %+v, %v", got, err)
	}
	if got, err := receipt.ParseCheckpoint(c.Text() + "extension line\n"); err != nil || got != c {
		t.Errorf("with an extension line: %+v, %v", got, err)
	}
	good := c.Text()
	for name, s := range map[string]string{
		"empty":           "",
		"no origin":       strings.TrimPrefix(good, c.Origin),
		"no newline":      strings.TrimSuffix(good, "\n"),
		"negative size":   strings.Replace(good, "12345", "-1", 1),
		"leading zero":    strings.Replace(good, "12345", "012345", 1),
		"size overflow":   strings.Replace(good, "12345", "9223372036854775808", 1),
		"short root":      c.Origin + "\n1\nAAAA\n",
		"root not base64": c.Origin + "\n1\n" + strings.Repeat("!", 44) + "\n",
	} {
		if _, err := receipt.ParseCheckpoint(s); !errors.Is(err, receipt.ErrCheckpoint) {
			t.Errorf("%s: %v, want ErrCheckpoint", name, err)
		}
	}
}

func TestTilePaths(t *testing.T) {
	for _, tc := range []struct {
		tile tlog.Tile
		path string
	}{
		{tlog.Tile{H: 8, L: 0, N: 0, W: 256}, "tile/0/000"},
		{tlog.Tile{H: 8, L: 0, N: 1234067, W: 256}, "tile/0/x001/x234/067"},
		{tlog.Tile{H: 8, L: 1, N: 2, W: 17}, "tile/1/002.p/17"},
		{tlog.Tile{H: 8, L: -1, N: 5, W: 256}, "tile/entries/005"},
		{tlog.Tile{H: 8, L: -1, N: 5, W: 3}, "tile/entries/005.p/3"},
	} {
		if got := receipt.TilePath(tc.tile); got != tc.path {
			t.Errorf("TilePath(%+v) = %q, want %q", tc.tile, got, tc.path)
		}
		if got, err := receipt.ParseTilePath(tc.path); err != nil || got != tc.tile {
			t.Errorf("ParseTilePath(%q) = %+v, %v", tc.path, got, err)
		}
	}
	for _, p := range []string{"", "tile/", "tile/0", "tile/8/0/000", "tile/0/1", "tile/0/000.p/256", "tile/0/000.p/0",
		"tile/entries/x000/001", "tile/0/../000", "tile/data/000", "tile/0/000/", "/tile/0/000"} {
		if tile, err := receipt.ParseTilePath(p); err == nil {
			t.Errorf("ParseTilePath(%q) = %+v, want an error", p, tile)
		}
	}
}

func TestEntryBundle(t *testing.T) {
	leaves := [][]byte{[]byte("a"), {}, []byte(strings.Repeat("x", 300))}
	b, err := receipt.EntryBundle(leaves)
	if err != nil {
		t.Fatal(err)
	}
	got, err := receipt.ParseEntryBundle(b, 3)
	if err != nil || len(got) != 3 || string(got[2]) != string(leaves[2]) {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	if _, err := receipt.ParseEntryBundle(b[:len(b)-1], 3); err == nil {
		t.Error("a truncated bundle parses")
	}
	if _, err := receipt.ParseEntryBundle(b, 2); err == nil {
		t.Error("a bundle of 3 parses as 2")
	}
	if _, err := receipt.EntryBundle([][]byte{make([]byte, 1<<16)}); err == nil {
		t.Error("a leaf over 65535 bytes bundles")
	}
}

// FuzzProofJSON: the proof decoder refuses or decodes, never panics, and
// what it decodes encodes back to an equal proof.
func FuzzProofJSON(f *testing.F) {
	f.Add([]byte(`{"index":3,"leaf":"YQ==","checkpoint":"o\n1\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n","proof":["AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]}`))
	f.Add([]byte(`{"index":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p receipt.Proof
		if err := json.Unmarshal(b, &p); err != nil {
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var q receipt.Proof
		if err := json.Unmarshal(again, &q); err != nil {
			t.Fatalf("re-encoded proof %s does not decode: %v", again, err)
		}
		if q.Index != p.Index || string(q.Leaf) != string(p.Leaf) || len(q.Hashes) != len(p.Hashes) {
			t.Fatalf("round trip changed the proof")
		}
	})
}
