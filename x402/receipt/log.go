package receipt

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/llm4agents/llm4agents/x402"
)

// The receipt log's public formats (docs/DESIGN.md D30), those the transparency-log
// ecosystem already verifies: RFC 6962 hashing (golang.org/x/mod/sumdb/tlog),
// C2SP tlog-checkpoint bodies signed as C2SP signed-notes (Ed25519,
// golang.org/x/mod/sumdb/note), and C2SP tlog-tiles paths of height 8.

// TileHeight is the height of the log's tiles: C2SP tlog-tiles fixes it.
const TileHeight = 8

// MaxCheckpointBytes bounds a signed checkpoint a verifier reads.
const MaxCheckpointBytes = 4 << 10

// Log errors.
var (
	// ErrCheckpoint: a checkpoint that does not parse, is not signed by the
	// published log key, or names another log.
	ErrCheckpoint = errors.New("receipt: bad checkpoint")
	// ErrProof: an inclusion or consistency proof that does not verify.
	ErrProof = errors.New("receipt: proof does not verify")
	// ErrFork: two checkpoints that cannot both be true of one append-only
	// log: the log showed different histories to different readers.
	ErrFork = errors.New("receipt: the log forked")
)

// Checkpoint is a C2SP tlog-checkpoint: the log's origin, its size and the
// root hash of its first Size leaves.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
}

// Text returns the checkpoint's body, as it is signed.
func (c Checkpoint) Text() string {
	return fmt.Sprintf("%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// Tree returns the checkpoint as tlog takes it.
func (c Checkpoint) Tree() tlog.Tree { return tlog.Tree{N: c.Size, Hash: c.Root} }

// ParseCheckpoint decodes a checkpoint body strictly: origin, a canonical
// decimal size and a standard base64 hash of 32 bytes, each on its line.
// Extension lines after the hash are allowed, as C2SP permits, and ignored.
func ParseCheckpoint(text string) (Checkpoint, error) {
	lines := strings.SplitAfter(text, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		return Checkpoint{}, fmt.Errorf("%w: not an origin, a size and a root hash, each on a line", ErrCheckpoint)
	}
	origin := strings.TrimSuffix(lines[0], "\n")
	size, err := strconv.ParseInt(strings.TrimSuffix(lines[1], "\n"), 10, 64)
	if origin == "" || err != nil || size < 0 || strconv.FormatInt(size, 10)+"\n" != lines[1] {
		return Checkpoint{}, fmt.Errorf("%w: no origin, or a size that is not a canonical decimal", ErrCheckpoint)
	}
	root, err := base64.StdEncoding.Strict().DecodeString(strings.TrimSuffix(lines[2], "\n"))
	if err != nil || len(root) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("%w: the root hash is not base64 of 32 bytes", ErrCheckpoint)
	}
	c := Checkpoint{Origin: origin, Size: size}
	copy(c.Root[:], root)
	return c, nil
}

// OpenCheckpoint verifies a signed checkpoint against the log's key (a note
// verifier key, "origin+hash+base64", as the well-known document publishes
// it) and returns it. The checkpoint's origin must be the key's name.
func OpenCheckpoint(signed []byte, key note.Verifier) (Checkpoint, error) {
	if len(signed) > MaxCheckpointBytes {
		return Checkpoint{}, fmt.Errorf("%w: over %d bytes", ErrCheckpoint, MaxCheckpointBytes)
	}
	n, err := note.Open(signed, note.VerifierList(key))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	c, err := ParseCheckpoint(n.Text)
	if err != nil {
		return Checkpoint{}, err
	}
	if c.Origin != key.Name() {
		return Checkpoint{}, fmt.Errorf("%w: origin %q is not the log key's %q", ErrCheckpoint, c.Origin, key.Name())
	}
	return c, nil
}

// SameLog checks that two checkpoints of one log can both be true: equal
// sizes have equal roots. Checkpoints of different sizes need a consistency
// proof (CheckConsistency).
func SameLog(a, b Checkpoint) error {
	if a.Origin != b.Origin {
		return fmt.Errorf("%w: checkpoints of %q and %q", ErrCheckpoint, a.Origin, b.Origin)
	}
	if a.Size == b.Size && a.Root != b.Root {
		return fmt.Errorf("%w: two checkpoints of size %d with roots %x and %x", ErrFork, a.Size, a.Root[:8], b.Root[:8])
	}
	return nil
}

// CheckConsistency checks that newer extends older, by a tlog consistency
// proof; a proof that fails is a fork (ErrFork), since both checkpoints
// were signed.
func CheckConsistency(older, newer Checkpoint, proof tlog.TreeProof) error {
	if err := SameLog(older, newer); err != nil {
		return err
	}
	if older.Size > newer.Size {
		older, newer = newer, older
	}
	if err := tlog.CheckTree(proof, newer.Size, newer.Root, older.Size, older.Root); err != nil {
		return fmt.Errorf("%w: size %d is not a prefix of size %d: %w", ErrFork, older.Size, newer.Size, err)
	}
	return nil
}

// Proof is the answer of GET /v1/receipts/{id}/proof: where the receipt's
// leaf is in the log, and the proof that it is included in the signed
// checkpoint.
type Proof struct {
	// Index is the leaf's position in the log.
	Index int64
	// Leaf is the leaf's bytes (Leaf.Marshal).
	Leaf []byte
	// Checkpoint is the signed checkpoint the proof is against.
	Checkpoint []byte
	// Hashes is the RFC 6962 inclusion proof of Index in the checkpoint.
	Hashes tlog.RecordProof
}

// proofJSON is the wire form of a Proof: bytes in standard base64, the
// checkpoint as its note text.
type proofJSON struct {
	Index      int64    `json:"index"`
	Leaf       string   `json:"leaf"`
	Checkpoint string   `json:"checkpoint"`
	Proof      []string `json:"proof"`
}

// MarshalJSON encodes the wire form.
func (p Proof) MarshalJSON() ([]byte, error) {
	w := proofJSON{Index: p.Index, Leaf: base64.StdEncoding.EncodeToString(p.Leaf),
		Checkpoint: string(p.Checkpoint), Proof: make([]string, len(p.Hashes))}
	for i, h := range p.Hashes {
		w.Proof[i] = base64.StdEncoding.EncodeToString(h[:])
	}
	return x402.Marshal(w)
}

// maxProofHashes bounds an inclusion proof: a log of 2^63 leaves needs 63.
const maxProofHashes = 64

// UnmarshalJSON decodes the wire form strictly.
func (p *Proof) UnmarshalJSON(b []byte) error {
	if err := x402.CheckStrictJSON(b); err != nil {
		return fmt.Errorf("%w: %w", ErrProof, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w proofJSON
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("%w: not {index, leaf, checkpoint, proof}", ErrProof)
	}
	if w.Index < 0 || len(w.Proof) > maxProofHashes || w.Checkpoint == "" {
		return fmt.Errorf("%w: negative index, no checkpoint or over %d hashes", ErrProof, maxProofHashes)
	}
	leaf, err := base64.StdEncoding.Strict().DecodeString(w.Leaf)
	if err != nil {
		return fmt.Errorf("%w: leaf is not standard base64", ErrProof)
	}
	out := Proof{Index: w.Index, Leaf: leaf, Checkpoint: []byte(w.Checkpoint), Hashes: make(tlog.RecordProof, len(w.Proof))}
	for i, s := range w.Proof {
		h, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || len(h) != tlog.HashSize {
			return fmt.Errorf("%w: proof hash %d is not base64 of 32 bytes", ErrProof, i)
		}
		copy(out.Hashes[i][:], h)
	}
	*p = out
	return nil
}

// VerifyInclusion checks that p proves r, signed in d, included in a
// checkpoint signed by the log's key, and returns that checkpoint: the
// checkpoint verifies, its leaf is r's (Leaf.Check), and the proof leads
// from the leaf to the checkpoint's root.
func VerifyInclusion(p *Proof, key note.Verifier, d Domain, r *Receipt) (Checkpoint, error) {
	c, err := OpenCheckpoint(p.Checkpoint, key)
	if err != nil {
		return Checkpoint{}, err
	}
	l, err := ParseLeaf(p.Leaf)
	if err != nil {
		return Checkpoint{}, err
	}
	if err := l.Check(d, r); err != nil {
		return Checkpoint{}, err
	}
	if p.Index >= c.Size {
		return Checkpoint{}, fmt.Errorf("%w: index %d is not in a log of %d leaves", ErrProof, p.Index, c.Size)
	}
	if err := tlog.CheckRecord(p.Hashes, c.Size, c.Root, p.Index, tlog.RecordHash(p.Leaf)); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: leaf %d in size %d: %w", ErrProof, p.Index, c.Size, err)
	}
	return c, nil
}

// TilePath returns the C2SP tlog-tiles path of t (height TileHeight),
// relative to the log's prefix: "tile/<L>/<N>[.p/<W>]" for hash tiles,
// "tile/entries/<N>[.p/<W>]" for entry bundles (t.L == -1).
func TilePath(t tlog.Tile) string {
	p := strings.Replace(t.Path(), "tile/"+strconv.Itoa(TileHeight)+"/", "tile/", 1)
	if t.L == -1 {
		p = strings.Replace(p, "tile/data/", "tile/entries/", 1)
	}
	return p
}

// ParseTilePath decodes a C2SP tlog-tiles path (TilePath's form, relative
// to the log's prefix); only the canonical encoding of a tile is accepted.
func ParseTilePath(p string) (tlog.Tile, error) {
	rest, ok := strings.CutPrefix(p, "tile/")
	if !ok {
		return tlog.Tile{}, fmt.Errorf("receipt: tile path %q does not start with tile/", p)
	}
	rest = strings.Replace(rest, "entries/", "data/", 1)
	t, err := tlog.ParseTilePath("tile/" + strconv.Itoa(TileHeight) + "/" + rest)
	if err != nil || t.H != TileHeight || TilePath(t) != p {
		return tlog.Tile{}, fmt.Errorf("receipt: %q is not a tile path", p)
	}
	return t, nil
}

// EntryBundle encodes leaves as a C2SP tlog-tiles entry bundle: each leaf
// prefixed by its length as a big-endian uint16.
func EntryBundle(leaves [][]byte) ([]byte, error) {
	var b bytes.Buffer
	for i, l := range leaves {
		if len(l) > 0xffff {
			return nil, fmt.Errorf("receipt: leaf %d is %d bytes, over 65535", i, len(l))
		}
		b.Write(binary.BigEndian.AppendUint16(nil, uint16(len(l)))) // #nosec G115 -- at most 0xffff, checked above
		b.Write(l)
	}
	return b.Bytes(), nil
}

// ParseEntryBundle decodes an entry bundle of exactly n leaves.
func ParseEntryBundle(b []byte, n int) ([][]byte, error) {
	leaves := make([][]byte, 0, n)
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, errors.New("receipt: entry bundle cut inside a length")
		}
		size := int(b[0])<<8 | int(b[1])
		if len(b) < 2+size {
			return nil, errors.New("receipt: entry bundle cut inside an entry")
		}
		leaves = append(leaves, b[2:2+size])
		b = b[2+size:]
	}
	if len(leaves) != n {
		return nil, fmt.Errorf("receipt: entry bundle of %d entries, want %d", len(leaves), n)
	}
	return leaves, nil
}
