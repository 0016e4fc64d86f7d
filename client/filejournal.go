package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llm4agents/llm4agents/x402"
)

// FileJournal is a crash-safe Journal: one JSON file per open entry in a
// directory only its owner may read (0700, files 0600), written to a temporary
// file, fsync'd, renamed into place and the directory fsync'd, so an entry is
// on disk before the payment it records is signed or sent. A new Transport on
// the same directory, after a crash, sends the payment already signed instead
// of signing a second one.
//
// The files hold payment authorizations that anyone holding them can spend
// until their validBefore, and payment-identifier ids: they are never logged
// and errors never quote them. A directory serves one process at a time;
// claims are held in memory.
//
// A file that does not decode, or that contradicts its name, fails Begin for
// its calls with ErrJournalCorrupt until it is removed by hand: guessing could
// pay twice.
type FileJournal struct {
	// MaxAge is DefaultJournalMaxAge when 0.
	MaxAge time.Duration
	// Now is time.Now when nil.
	Now func() time.Time

	dir  string
	mu   sync.Mutex
	held map[string]bool // file names claimed by a call in this process
}

// maxJournalFile bounds an entry file: a real one is a few KiB.
const maxJournalFile = 256 << 10

// journalVersion is the version of the entry file format.
const journalVersion = 1

// tempPrefix starts the names of files being written.
const tempPrefix = ".tmp-"

// NewFileJournal opens the journal in dir, creating it with mode 0700. An
// existing directory that group or others may access is refused, since the
// entries are spendable payments. Leftover temporary files of a crashed write
// are removed.
func NewFileJournal(dir string) (*FileJournal, error) {
	if dir == "" {
		return nil, errors.New("client: journal directory is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("client: create journal directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("client: journal directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("client: journal %s is not a directory", dir)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("client: journal directory %s has mode %#o; it holds spendable payments, so chmod it 0700", dir, fi.Mode().Perm())
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("client: read journal directory: %w", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n.Name(), tempPrefix) {
			_ = os.Remove(filepath.Join(dir, n.Name()))
		}
	}
	return &FileJournal{dir: dir, held: map[string]bool{}}, nil
}

func (j *FileJournal) now() time.Time {
	if j.Now != nil {
		return j.Now()
	}
	return time.Now()
}

func (j *FileJournal) maxAge() time.Duration {
	if j.MaxAge > 0 {
		return j.MaxAge
	}
	return DefaultJournalMaxAge
}

// keyPrefix is the file name prefix of a Key's entries: its SHA-256, so names
// say nothing of the request.
func keyPrefix(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

func entryName(key string, slot int) string {
	return keyPrefix(key) + "-" + strconv.Itoa(slot) + ".json"
}

// slotsOf lists the slots of key's entry files, in order.
func (j *FileJournal) slotsOf(key string) ([]int, error) {
	names, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("read journal directory: %w", err)
	}
	prefix := keyPrefix(key) + "-"
	var slots []int
	for _, n := range names {
		rest, ok := strings.CutPrefix(n.Name(), prefix)
		if !ok {
			continue
		}
		digits, ok := strings.CutSuffix(rest, ".json")
		s, err := strconv.Atoi(digits)
		if !ok || err != nil || s < 0 || strconv.Itoa(s) != digits {
			return nil, fmt.Errorf("%w: unexpected file %s in the journal", ErrJournalCorrupt, n.Name())
		}
		slots = append(slots, s)
	}
	slices.Sort(slots)
	return slots, nil
}

// Begin claims the oldest open entry with e.Key not held by another call, or
// records e as a new one, durably, before returning.
func (j *FileJournal) Begin(ctx context.Context, e *JournalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	slots, err := j.slotsOf(e.Key)
	if err != nil {
		return err
	}
	now := j.now()
	for _, s := range slots {
		name := entryName(e.Key, s)
		if j.held[name] {
			continue
		}
		got, err := j.read(name, e.Key, s)
		if err != nil {
			return err
		}
		if expired(got, now, j.maxAge()) {
			if err := j.remove(name); err != nil {
				return err
			}
			continue
		}
		j.held[name] = true
		*e = *got
		return nil
	}
	e.Slot, e.Created = freeSlot(slots), now
	name := entryName(e.Key, e.Slot)
	if err := j.write(ctx, name, e); err != nil {
		return err
	}
	j.held[name] = true
	return nil
}

// Signed records the signed payment of e, durably, before returning.
func (j *FileJournal) Signed(ctx context.Context, e *JournalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	name := entryName(e.Key, e.Slot)
	if !j.held[name] {
		return ErrJournalNotHeld
	}
	return j.write(ctx, name, e)
}

// Finish records the outcome of e and releases it; a paid or unsigned entry is
// removed.
func (j *FileJournal) Finish(ctx context.Context, e *JournalEntry, o Outcome) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	name := entryName(e.Key, e.Slot)
	if !j.held[name] {
		return ErrJournalNotHeld
	}
	delete(j.held, name)
	if o == OutcomePaid || e.Header == "" {
		return j.remove(name)
	}
	return j.write(ctx, name, e)
}

// entryFile is the on-disk form of a JournalEntry.
type entryFile struct {
	Version        int                       `json:"version"`
	Key            string                    `json:"key"`
	Slot           int                       `json:"slot"`
	ID             string                    `json:"id"`
	Method         string                    `json:"method"`
	Resource       string                    `json:"resource"`
	IdempotencyKey string                    `json:"idempotencyKey,omitempty"`
	Fingerprint    string                    `json:"fingerprint"`
	Created        int64                     `json:"created"` // unix milliseconds
	Requirements   *x402.PaymentRequirements `json:"requirements,omitempty"`
	Header         string                    `json:"header,omitempty"`
	ValidBefore    int64                     `json:"validBefore,omitempty"` // unix seconds, as signed
	Outcome        string                    `json:"outcome"`
	Sends          int                       `json:"sends"`
}

func encodeEntry(e *JournalEntry) ([]byte, error) {
	f := entryFile{
		Version: journalVersion, Key: e.Key, Slot: e.Slot, ID: e.ID.Reveal(), Method: e.Method, Resource: e.Resource,
		IdempotencyKey: e.IdempotencyKey, Fingerprint: e.Fingerprint, Created: e.Created.UnixMilli(),
		Header: e.Header.Reveal(), Outcome: e.Outcome.String(), Sends: e.Sends,
	}
	if e.Header != "" {
		f.Requirements = &e.Requirements
		f.ValidBefore = e.ValidBefore.Unix()
	}
	return x402.Marshal(f)
}

// decodeEntry parses an entry file strictly and checks that it is consistent:
// the key and slot its name says, a valid id, and, once signed, a payment
// header that decodes, carries that id if any, and a validBefore. Errors never
// quote the file's content.
func decodeEntry(b []byte, key string, slot int) (*JournalEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f entryFile
	if err := dec.Decode(&f); err != nil {
		return nil, errors.New("not a journal entry of this version")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the entry")
	}
	if x402.CheckStrictJSON(b) != nil {
		return nil, errors.New("duplicate keys or too deep")
	}
	var o Outcome
	switch f.Outcome {
	case "unknown":
		o = OutcomeUnknown
	case "not_paid":
		o = OutcomeNotPaid
	default:
		return nil, errors.New("outcome is not unknown or not_paid")
	}
	switch {
	case f.Version != journalVersion:
		return nil, fmt.Errorf("version %d is not %d", f.Version, journalVersion)
	case f.Key != key || f.Slot != slot:
		return nil, errors.New("key or slot differs from the file name")
	case x402.ValidPaymentID(f.ID) != nil:
		return nil, errors.New("invalid payment id")
	case f.Created <= 0 || f.Sends < 0 || f.Fingerprint == "" || f.Method == "":
		return nil, errors.New("missing fields")
	}
	e := &JournalEntry{
		Key: f.Key, Slot: f.Slot, ID: Secret(f.ID), Method: f.Method, Resource: f.Resource, IdempotencyKey: f.IdempotencyKey,
		Fingerprint: f.Fingerprint, Created: time.UnixMilli(f.Created), Outcome: o, Sends: f.Sends,
	}
	if f.Header == "" {
		if f.Requirements != nil || f.ValidBefore != 0 {
			return nil, errors.New("requirements without a payment")
		}
		return e, nil
	}
	p, err := x402.DecodePaymentPayload(f.Header)
	if err != nil {
		return nil, errors.New("the recorded payment does not decode")
	}
	if id, err := x402.PaymentIDFromPayload(p, false); err != nil || (id != "" && id != f.ID) {
		return nil, errors.New("the recorded payment carries another payment id")
	}
	if f.Requirements == nil || f.Requirements.Scheme == "" || f.ValidBefore <= 0 {
		return nil, errors.New("a payment without requirements or validBefore")
	}
	e.Header, e.Requirements, e.ValidBefore = Secret(f.Header), *f.Requirements, time.Unix(f.ValidBefore, 0)
	return e, nil
}

// read loads the entry file name, which must be key's slot.
func (j *FileJournal) read(name, key string, slot int) (*JournalEntry, error) {
	path := filepath.Join(j.dir, name)
	f, err := os.Open(path) // #nosec G304 -- a name this journal made, in its own directory
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxJournalFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxJournalFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrJournalCorrupt, path, maxJournalFile)
	}
	e, err := decodeEntry(b, key, slot)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v; remove it by hand once you know whether its payment went through", ErrJournalCorrupt, path, err) //nolint:errorlint // the detail is a fixed text, never the file's content
	}
	return e, nil
}

// write replaces name with e: a temporary file in the directory, fsync'd,
// renamed over name, and the directory fsync'd.
func (j *FileJournal) write(ctx context.Context, name string, e *JournalEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := encodeEntry(e)
	if err != nil {
		return fmt.Errorf("encode entry: %w", err)
	}
	tmp, err := os.CreateTemp(j.dir, tempPrefix+"*") // mode 0600
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	_, werr := tmp.Write(b)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), filepath.Join(j.dir, name))
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write entry: %w", werr)
	}
	return j.syncDir()
}

func (j *FileJournal) remove(name string) error {
	if err := os.Remove(filepath.Join(j.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w", err)
	}
	return j.syncDir()
}

// syncDir makes a rename or removal in the directory durable. Windows cannot
// open a directory for syncing; its renames are durable on return.
func (j *FileJournal) syncDir() error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(j.dir)
	if err != nil {
		return fmt.Errorf("%w", err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

var _ Journal = (*FileJournal)(nil)
