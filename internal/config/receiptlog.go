package config

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// ReceiptLog turns on the public receipt log (docs/DESIGN.md D30): every
// receipt the gateway signs is a leaf of an append-only Merkle log that
// every replica shares through the store, with checkpoints signed by the
// log's key, served at /log/ for buyers and auditors to verify.
type ReceiptLog struct {
	// Enabled turns the log on; off by default, on in the demo.
	Enabled bool `yaml:"enabled"`
	// KeyFile or KeyEnv is where the checkpoint signing key is: exactly one
	// of them, a signed-note private key ("PRIVATE+KEY+<origin>+<hash>+<base64>",
	// as `llm4agents log keygen` writes it). The key's name is the log's
	// origin, the first line of every checkpoint. Every replica uses the same
	// key: a checkpoint is the log's, whichever replica signed it.
	KeyFile string `yaml:"key_file"`
	KeyEnv  string `yaml:"key_env"`
	// MaxMergeDelay is the log's promise, written into every receipt
	// (logBy): the log includes a receipt this long after it was issued, at
	// the latest. Default DefaultMaxMergeDelay.
	MaxMergeDelay time.Duration `yaml:"max_merge_delay"`
	// Anchor writes the log's checkpoints on chain; off unless set.
	Anchor Anchor `yaml:"anchor"`
}

// Anchor writes the receipt log's latest checkpoint (its size and root hash)
// on chain every Every, when the log grew: a transaction to the
// ReceiptLogAnchor contract at Contract on network.id, sent by the
// in-process facilitator's signer, which the well-known document publishes
// as the anchors' sender. An anchor pins the log's history where the gateway
// cannot rewrite it; `llm4agents log audit --rpc` checks the log against it.
type Anchor struct {
	// Enabled turns anchoring on; off by default, on in the demo.
	Enabled bool `yaml:"enabled"`
	// Contract is the ReceiptLogAnchor's address (`llm4agents devnet` prints
	// it as receiptLogAnchor on a dev node). Required when enabled; the
	// demo fills it in with the contract its chain deploys.
	Contract string `yaml:"contract"`
	// Every is how often the latest checkpoint is anchored, if the log grew
	// since the last anchor. Default DefaultAnchorEvery.
	Every time.Duration `yaml:"every"`
	// Senders are the other replicas' anchor senders (each replica's
	// in-process facilitator signer anchors whenever that replica holds the
	// log's lease): the well-known document publishes them with this
	// replica's own, so a buyer checking anchors through any replica takes
	// every replica's as the gateway's. Empty with one replica.
	Senders []string `yaml:"senders,omitempty"`
}

// SenderAddresses returns Senders, which Validate checked.
func (a Anchor) SenderAddresses() []common.Address {
	out := make([]common.Address, 0, len(a.Senders))
	for _, s := range a.Senders {
		if addr, err := exact.ParseAddress(s); err == nil {
			out = append(out, addr)
		}
	}
	return out
}

// Defaults and bounds of Anchor.Every. Each anchor costs a transaction's gas;
// below the minimum anchors would come faster than blocks, above the maximum
// the log's history would stay unpinned longer than an audit period.
const (
	DefaultAnchorEvery = 10 * time.Minute
	DemoAnchorEvery    = 2 * time.Second
	MinAnchorEvery     = time.Second
	MaxAnchorEvery     = 24 * time.Hour
)

// ContractAddress returns the anchor contract's address, which Validate
// checked.
func (a Anchor) ContractAddress() (common.Address, error) { return exact.ParseAddress(a.Contract) }

// Bounds of ReceiptLog.MaxMergeDelay. Below the minimum, integration
// rounds would come faster than a store round trip; above the maximum, a
// buyer waits longer to verify a bill than a reader waits for a page.
const (
	DefaultMaxMergeDelay = 2 * time.Second
	MinMaxMergeDelay     = 200 * time.Millisecond
	MaxMaxMergeDelay     = 10 * time.Minute
)

func (c *Config) setLogDefaults() {
	if c.Log.Enabled && c.Log.MaxMergeDelay == 0 {
		c.Log.MaxMergeDelay = DefaultMaxMergeDelay
	}
	if c.Log.Anchor.Enabled && c.Log.Anchor.Every == 0 {
		c.Log.Anchor.Every = DefaultAnchorEvery
	}
}

func (c *Config) validateLog(p *problems) {
	lg := &c.Log
	if !lg.Enabled {
		return
	}
	if !c.demo {
		switch {
		case lg.KeyFile == "" && lg.KeyEnv == "":
			p.add("log.key_file", "is required with the receipt log: the checkpoint key's file, as `llm4agents log keygen` writes it (or set key_env)")
		case lg.KeyFile != "" && lg.KeyEnv != "":
			p.add("log.key_env", "set key_file or key_env, not both")
		case lg.KeyEnv != "":
			checkEnvName(p, "log.key_env", lg.KeyEnv)
		}
	}
	if !c.ReceiptsOn() {
		p.add("log.enabled", "needs receipts (receipts.enabled, or credits.enabled): the log's leaves are the receipts the gateway signs")
	}
	if lg.MaxMergeDelay < MinMaxMergeDelay || lg.MaxMergeDelay > MaxMaxMergeDelay {
		p.add("log.max_merge_delay", "%s is not between %s and %s", lg.MaxMergeDelay, MinMaxMergeDelay, MaxMaxMergeDelay)
	}
}

func (c *Config) validateAnchor(p *problems) {
	a := &c.Log.Anchor
	if !a.Enabled {
		return
	}
	if !c.Log.Enabled {
		p.add("log.anchor.enabled", "needs the receipt log (log.enabled: true): anchors are its checkpoints")
	}
	if c.Facilitator.Mode == ModeRemote {
		p.add("log.anchor.enabled", "needs facilitator.mode %s: anchors are sent by the in-process facilitator's signer, "+
			"and a remote facilitator signs nothing for the gateway; turn anchoring off, or run the facilitator in process", ModeInProcess)
	}
	contract := checkAddress(p, "log.anchor.contract", a.Contract, "the ReceiptLogAnchor contract (`llm4agents devnet` prints it as receiptLogAnchor)")
	if contract != (common.Address{}) {
		if asset, err := c.Network.AssetAddress(); err == nil && asset == contract {
			p.add("log.anchor.contract", "is network.asset, the token: anchors go to the ReceiptLogAnchor contract")
		}
	}
	if a.Every < MinAnchorEvery || a.Every > MaxAnchorEvery {
		p.add("log.anchor.every", "%s is not between %s and %s", a.Every, MinAnchorEvery, MaxAnchorEvery)
	}
	if len(a.Senders) >= receipt.MaxAnchorSenders {
		p.add("log.anchor.senders", "lists %d senders; at most %d besides this replica's own", len(a.Senders), receipt.MaxAnchorSenders-1)
		return
	}
	seen := map[common.Address]int{}
	for i, s := range a.Senders {
		at := fmt.Sprintf("log.anchor.senders[%d]", i)
		addr := checkAddress(p, at, s, "another replica's anchor sender (its facilitator signer's address)")
		if addr == (common.Address{}) {
			continue
		}
		if j, dup := seen[addr]; dup {
			p.add(at, "%s is already log.anchor.senders[%d]", addr.Hex(), j)
		}
		seen[addr] = i
	}
}

// LogKey returns the log's checkpoint signer and its public verifier key
// ("<origin>+<hash>+<base64>"), from the key's file or variable. The demo,
// which names neither, gets a new key named for its public URL's host: its
// checkpoints verify against the key it publishes while it runs. Errors
// never repeat the key.
func (c *Config) LogKey(getenv func(string) string) (note.Signer, string, error) {
	lg := c.Log
	var skey string
	if c.demo && lg.KeyFile == "" && lg.KeyEnv == "" {
		var err error
		if skey, _, err = note.GenerateKey(rand.Reader, c.logOrigin()); err != nil {
			return nil, "", fmt.Errorf("generate a log key: %w", err)
		}
	} else {
		var err error
		if skey, err = ReadSecret(lg.KeyFile, lg.KeyEnv, getenv); err != nil {
			return nil, "", fmt.Errorf("log key: %w", err)
		}
	}
	return ParseLogKey(skey)
}

// logOrigin is the demo log's origin: its public URL without the scheme.
func (c *Config) logOrigin() string {
	o := strings.TrimPrefix(strings.TrimPrefix(c.PublicURL, "https://"), "http://")
	return strings.TrimRight(o, "/") + "/receipts"
}

// ParseLogKey decodes a signed-note private key and derives its public
// verifier key. Errors never repeat the key.
func ParseLogKey(skey string) (note.Signer, string, error) {
	skey = strings.TrimSpace(skey)
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, "", errors.New("log key is not a signed-note private key (PRIVATE+KEY+<origin>+<hash>+<base64>, as `llm4agents log keygen` writes it)")
	}
	pub, err := publicOf(skey)
	if err != nil {
		return nil, "", err
	}
	vkey, err := note.NewEd25519VerifierKey(s.Name(), pub)
	if err != nil {
		return nil, "", fmt.Errorf("log key: derive its public key: %w", err)
	}
	return s, vkey, nil
}

// publicOf returns the Ed25519 public key of a signed-note private key,
// which note.NewSigner has accepted: "PRIVATE+KEY+<name>+<hash>+<base64 of
// the algorithm byte 1 and the 32-byte seed>".
func publicOf(skey string) (ed25519.PublicKey, error) {
	// The name holds no '+' (note.NewSigner checked), while base64 may.
	f := strings.SplitN(skey, "+", 5)
	if len(f) != 5 {
		return nil, errors.New("log key is not an Ed25519 signed-note private key")
	}
	raw, err := base64.StdEncoding.DecodeString(f[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return nil, errors.New("log key is not an Ed25519 signed-note private key")
	}
	pub, _ := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return pub, nil
}
