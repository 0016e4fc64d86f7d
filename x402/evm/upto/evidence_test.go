package upto_test

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

func TestKey(t *testing.T) {
	owner := common.HexToAddress(vFrom)
	nonce := big.NewInt(42)
	const want = "eip155:1337/000000000022d473030f116ddee9f6b43ac78ba3/f39fd6e51aad88f6f4ce6ab8827279cfffb92266/000000000000000000000000000000000000000000000000000000000000002a"
	if got := upto.Key("eip155:1337", owner, nonce); got != want {
		t.Errorf("Key = %s\nwant  %s", got, want)
	}
	network, o, n, err := upto.ParseKey(want)
	if err != nil || network != "eip155:1337" || o != owner || n.Cmp(nonce) != 0 {
		t.Errorf("ParseKey = %s, %s, %v, %v", network, o.Hex(), n, err)
	}

	// One key per Permit2 nonce: permits that differ in token, amount,
	// deadline, recipient or signature but share owner and nonce collide, as
	// they do on chain; another nonce or owner does not.
	f := newFixture()
	base, _, err := newVerifier(nil).Check(f.payload(t), f.req)
	if err != nil {
		t.Fatal(err)
	}
	other := newFixture()
	other.auth.Permitted.Amount = big.NewInt(1)
	other.auth.Permitted.Token = stranger
	other.auth.Deadline = big.NewInt(checkNow.Unix() + 10)
	other.auth.Witness.To = stranger
	if k1, k2 := base.Key(), upto.Key(base.Network, other.auth.From, other.auth.Nonce); k1 != k2 {
		t.Errorf("same owner and nonce, different keys:\n%s\n%s", k1, k2)
	}
	if upto.Key(base.Network, f.auth.From, big.NewInt(43)) == base.Key() {
		t.Error("another nonce has the same key")
	}
	if upto.Key(base.Network, stranger, f.auth.Nonce) == base.Key() {
		t.Error("another owner has the same key")
	}
	if upto.Key("eip155:8453", f.auth.From, f.auth.Nonce) == base.Key() {
		t.Error("another network has the same key")
	}
	// The largest nonce fits.
	maxNonce := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	if _, _, n, err := upto.ParseKey(upto.Key("eip155:1", owner, maxNonce)); err != nil || n.Cmp(maxNonce) != 0 {
		t.Errorf("max nonce: %v, %v", n, err)
	}

	bad := []string{
		"",
		"eip155:1337",
		strings.Replace(want, "eip155:1337/", "/", 1),
		strings.ToUpper(want),
		strings.Replace(want, "000000000022d473030f116ddee9f6b43ac78ba3", "5fbdb2315678afecb367f032d93f642f64180aa3", 1), // a token, not Permit2
		want + "/x",
		want[:len(want)-2],
		strings.Replace(want, "2a", "zz", 1),
	}
	for _, k := range bad {
		if _, _, _, err := upto.ParseKey(k); err == nil {
			t.Errorf("ParseKey(%q) accepted", k)
		}
	}
}

func transferLog(token, from, to common.Address, value int64) *types.Log {
	return &types.Log{
		Address: token,
		Topics:  []common.Hash{upto.TopicTransfer, common.BytesToHash(from[:]), common.BytesToHash(to[:])},
		Data:    common.LeftPadBytes(big.NewInt(value).Bytes(), 32),
	}
}

func TestPaysPermit(t *testing.T) {
	f := newFixture()
	a := &f.auth
	token := a.Permitted.Token
	payTo := a.Witness.To
	charge := big.NewInt(1234)
	tests := []struct {
		name string
		logs []*types.Log
		want bool
	}{
		{"the transfer", []*types.Log{transferLog(token, a.From, payTo, 1234)}, true},
		{"among others", []*types.Log{
			transferLog(token, stranger, payTo, 1234),
			{Address: upto.ProxyAddress, Topics: []common.Hash{{1}}},
			transferLog(token, a.From, payTo, 1234),
		}, true},
		{"none", nil, false},
		{"other amount", []*types.Log{transferLog(token, a.From, payTo, 1235)}, false},
		{"the full amount, not the charge", []*types.Log{transferLog(token, a.From, payTo, maxAmt)}, false},
		{"other token", []*types.Log{transferLog(stranger, a.From, payTo, 1234)}, false},
		{"other sender", []*types.Log{transferLog(token, stranger, payTo, 1234)}, false},
		{"other recipient", []*types.Log{transferLog(token, a.From, stranger, 1234)}, false},
		{"removed", []*types.Log{func() *types.Log { l := transferLog(token, a.From, payTo, 1234); l.Removed = true; return l }()}, false},
		{"not a Transfer", []*types.Log{func() *types.Log {
			l := transferLog(token, a.From, payTo, 1234)
			l.Topics[0] = common.Hash{2}
			return l
		}()}, false},
		{"short data", []*types.Log{func() *types.Log { l := transferLog(token, a.From, payTo, 1234); l.Data = l.Data[1:]; return l }()}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := upto.PaysPermit(tc.logs, token, a, charge); got != tc.want {
				t.Errorf("PaysPermit = %v, want %v", got, tc.want)
			}
		})
	}
}

// callerFunc is an ethereum.ContractCaller from a function.
type callerFunc func(msg ethereum.CallMsg) ([]byte, error)

func (f callerFunc) CallContract(_ context.Context, msg ethereum.CallMsg, _ *big.Int) ([]byte, error) {
	return f(msg)
}

func TestNonceUsed(t *testing.T) {
	owner := testchain.DevAddress(payerIdx)
	// The owner's bitmap: word 0 has bits 0 and 255 set, word 2^248-1 (the
	// last) has bit 7.
	bitmap := func(msg ethereum.CallMsg) ([]byte, error) {
		if *msg.To != upto.Permit2Address {
			return nil, errors.New("not Permit2")
		}
		m, err := contracts.MethodById(msg.Data)
		if err != nil || m.Name != "nonceBitmap" {
			return nil, errors.New("not nonceBitmap")
		}
		args, err := m.Inputs.Unpack(msg.Data[4:])
		if err != nil {
			return nil, err
		}
		if args[0].(common.Address) != owner {
			return make([]byte, 32), nil
		}
		word := new(big.Int)
		switch pos := args[1].(*big.Int); {
		case pos.Sign() == 0:
			word.SetBit(word, 0, 1).SetBit(word, 255, 1)
		case pos.Cmp(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 248), big.NewInt(1))) == 0:
			word.SetBit(word, 7, 1)
		}
		return common.LeftPadBytes(word.Bytes(), 32), nil
	}
	last := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(256))
	tests := []struct {
		owner common.Address
		nonce *big.Int
		want  bool
	}{
		{owner, big.NewInt(0), true},
		{owner, big.NewInt(1), false},
		{owner, big.NewInt(255), true},
		{owner, big.NewInt(256), false}, // word 1, bit 0
		{owner, new(big.Int).Add(last, big.NewInt(7)), true},
		{owner, new(big.Int).Add(last, big.NewInt(6)), false},
		{stranger, big.NewInt(0), false}, // the space is per owner
	}
	for _, tc := range tests {
		got, err := upto.NonceUsed(context.Background(), callerFunc(bitmap), tc.owner, tc.nonce)
		if err != nil || got != tc.want {
			t.Errorf("NonceUsed(%s, %s) = %v, %v; want %v", tc.owner.Hex(), tc.nonce, got, err, tc.want)
		}
	}
	fails := []callerFunc{
		func(ethereum.CallMsg) ([]byte, error) { return nil, errors.New("node down") },
		func(ethereum.CallMsg) ([]byte, error) { return nil, nil }, // Permit2 not deployed: empty return
		func(ethereum.CallMsg) ([]byte, error) { return []byte{1}, nil },
	}
	for i, c := range fails {
		if _, err := upto.NonceUsed(context.Background(), c, owner, big.NewInt(0)); err == nil {
			t.Errorf("failing node %d: NonceUsed passed", i)
		}
	}
}

// fakeUseChain serves FindUse: logs by filter, transactions by hash.
type fakeUseChain struct {
	logs []types.Log
	txs  map[common.Hash]*types.Transaction
	q    ethereum.FilterQuery
}

func (c *fakeUseChain) FilterLogs(_ context.Context, q ethereum.FilterQuery) ([]types.Log, error) {
	c.q = q
	return c.logs, nil
}

func (c *fakeUseChain) SubscribeFilterLogs(context.Context, ethereum.FilterQuery, chan<- types.Log) (ethereum.Subscription, error) {
	return nil, errors.New("not supported")
}

func (c *fakeUseChain) TransactionByHash(_ context.Context, h common.Hash) (*types.Transaction, bool, error) {
	tx, ok := c.txs[h]
	if !ok {
		return nil, false, ethereum.NotFound
	}
	return tx, false, nil
}

func TestFindUse(t *testing.T) {
	f := newFixture()
	a := &f.auth
	token, payTo := a.Permitted.Token, a.Witness.To
	sig := make([]byte, 65)
	settle := func(auth *upto.Authorization, amount int64) []byte {
		data, err := upto.SettleCalldata(auth, sig, big.NewInt(amount))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	tx := func(to common.Address, data []byte) *types.Transaction {
		return types.NewTx(&types.DynamicFeeTx{To: &to, Data: data, Gas: 100_000})
	}
	otherNonce := *a
	otherNonce.Nonce = big.NewInt(43)

	ours := tx(upto.ProxyAddress, settle(a, 1234))
	plainTransfer := tx(token, []byte{0xa9, 0x05, 0x9c, 0xbb})
	sameOwnerOtherNonce := tx(upto.ProxyAddress, settle(&otherNonce, 1234))
	notSettle := tx(upto.ProxyAddress, []byte{1, 2, 3, 4, 5})
	logAt := func(tx *types.Transaction, block uint64, value int64) types.Log {
		l := *transferLog(token, a.From, payTo, value)
		l.TxHash, l.BlockNumber = tx.Hash(), block
		return l
	}
	c := &fakeUseChain{
		logs: []types.Log{
			logAt(plainTransfer, 10, 1234),
			logAt(sameOwnerOtherNonce, 11, 1234),
			logAt(notSettle, 12, 1234),
			logAt(ours, 13, 1234),
		},
		txs: map[common.Hash]*types.Transaction{
			plainTransfer.Hash(): plainTransfer, sameOwnerOtherNonce.Hash(): sameOwnerOtherNonce,
			notSettle.Hash(): notSettle, ours.Hash(): ours,
		},
	}
	got, err := upto.FindUse(context.Background(), c, token, a.From, payTo, a.Nonce, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.TxHash != ours.Hash() || got.Block != 13 || got.Amount.Int64() != 1234 {
		t.Fatalf("FindUse = %+v, want tx %s in block 13 moving 1234", got, ours.Hash().Hex())
	}
	if c.q.FromBlock.Uint64() != 7 || len(c.q.Addresses) != 1 || c.q.Addresses[0] != token ||
		c.q.Topics[0][0] != upto.TopicTransfer || c.q.Topics[1][0] != common.BytesToHash(a.From[:]) || c.q.Topics[2][0] != common.BytesToHash(payTo[:]) {
		t.Errorf("filter %+v", c.q)
	}

	// Not there (yet): nil, no error.
	c.logs = c.logs[:3]
	if got, err := upto.FindUse(context.Background(), c, token, a.From, payTo, a.Nonce, 7); got != nil || err != nil {
		t.Errorf("FindUse without the use = %+v, %v", got, err)
	}
	// A removed log is no use.
	removed := logAt(ours, 13, 1234)
	removed.Removed = true
	c.logs = []types.Log{removed}
	if got, err := upto.FindUse(context.Background(), c, token, a.From, payTo, a.Nonce, 7); got != nil || err != nil {
		t.Errorf("FindUse with a removed log = %+v, %v", got, err)
	}
	// A transaction the node cannot find is an error, not an absence.
	c.logs = []types.Log{logAt(ours, 13, 1234)}
	delete(c.txs, ours.Hash())
	if _, err := upto.FindUse(context.Background(), c, token, a.From, payTo, a.Nonce, 7); err == nil {
		t.Error("FindUse with a missing transaction passed")
	}
}
