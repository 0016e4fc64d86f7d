package testchain_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

// The EIP-712 and EIP-3009 type hashes, spelled out so that the test checks
// both the strings and the contract's constants.
var (
	eip712DomainTypehash = common.HexToHash("0x8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f")
	transferTypehash     = common.HexToHash("0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
	receiveTypehash      = common.HexToHash("0xd099cc98ef71107a616c4f0f941f04c322d8e254fe26b3c6668db87aae413de8")
	cancelTypehash       = common.HexToHash("0x158b0a9edf7a828aad02f63cd515c68ef2f50ba807396f6d12842833a1597429")
)

// Revert strings of USDC's FiatToken v2.2 that the token reproduces.
const (
	reasonInvalidSignature = "FiatTokenV2: invalid signature"
	reasonNotYetValid      = "FiatTokenV2: authorization is not yet valid"
	reasonExpired          = "FiatTokenV2: authorization is expired"
	reasonUsed             = "FiatTokenV2: authorization is used or canceled"
	reasonNotPayee         = "FiatTokenV2: caller must be the payee"
	reasonBalance          = "ERC20: transfer amount exceeds balance"
	reasonHighS            = "ECRecover: invalid signature 's' value"
	reasonBadV             = "ECRecover: invalid signature 'v' value"
)

func TestDevKeys(t *testing.T) {
	// The addresses anvil and hardhat print for DevMnemonic.
	want := []common.Address{
		common.HexToAddress("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
		common.HexToAddress("0x70997970C51812dc3A010C7d01b50e0d17dc79C8"),
		common.HexToAddress("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
		common.HexToAddress("0x90F79bf6EB2c4f870365E785982E1f101E93b906"),
		common.HexToAddress("0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"),
		common.HexToAddress("0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc"),
		common.HexToAddress("0x976EA74026E726554dB657fA54763abd0C3a0aa9"),
		common.HexToAddress("0x14dC79964da2C08b23698B3D3cc7Ca32193d9955"),
		common.HexToAddress("0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f"),
		common.HexToAddress("0xa0Ee7A142d267C1f36714E4a8F75612F20a79720"),
	}
	var got []common.Address
	for i := range testchain.NumDevKeys {
		got = append(got, testchain.DevAddress(i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dev addresses (-want +got):\n%s", diff)
	}
}

func TestSimulatedToken(t *testing.T) {
	s := testchain.NewSimulated(t)
	opts := &bind.CallOpts{Context: t.Context()}
	token := s.TokenContract

	type state struct {
		Name, Version    string
		Decimals         uint8
		DomainSeparator  common.Hash
		TransferTypehash common.Hash
		ReceiveTypehash  common.Hash
		CancelTypehash   common.Hash
		TotalSupply      string
		Balances         map[string]string
		ChainID          string
	}
	got := state{
		Name:             call(token.Name(opts)).must(t, "name"),
		Version:          call(token.Version(opts)).must(t, "version"),
		Decimals:         call(token.Decimals(opts)).must(t, "decimals"),
		DomainSeparator:  call(token.DOMAINSEPARATOR(opts)).must(t, "DOMAIN_SEPARATOR"),
		TransferTypehash: call(token.TRANSFERWITHAUTHORIZATIONTYPEHASH(opts)).must(t, "TRANSFER_WITH_AUTHORIZATION_TYPEHASH"),
		ReceiveTypehash:  call(token.RECEIVEWITHAUTHORIZATIONTYPEHASH(opts)).must(t, "RECEIVE_WITH_AUTHORIZATION_TYPEHASH"),
		CancelTypehash:   call(token.CANCELAUTHORIZATIONTYPEHASH(opts)).must(t, "CANCEL_AUTHORIZATION_TYPEHASH"),
		TotalSupply:      call(token.TotalSupply(opts)).must(t, "totalSupply").String(),
		Balances: map[string]string{
			"deployer": s.BalanceOf(t, s.Addr(0)).String(),
			"payer 1":  s.BalanceOf(t, s.Addr(1)).String(),
			"payer 5":  s.BalanceOf(t, s.Addr(testchain.SimulatedPayers)).String(),
			"6":        s.BalanceOf(t, s.Addr(testchain.SimulatedPayers+1)).String(),
		},
		ChainID: s.ChainID.String(),
	}

	want := state{
		Name:            "USD Coin",
		Version:         "2",
		Decimals:        6,
		DomainSeparator: domainSeparator("USD Coin", "2", big.NewInt(1337), s.Token),
		// The type strings, hashed here, must give the constants the test
		// signs with.
		TransferTypehash: crypto.Keccak256Hash([]byte("TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)")),
		ReceiveTypehash:  crypto.Keccak256Hash([]byte("ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)")),
		CancelTypehash:   crypto.Keccak256Hash([]byte("CancelAuthorization(address authorizer,bytes32 nonce)")),
		TotalSupply:      "5000000000",
		Balances: map[string]string{
			"deployer": "0",
			"payer 1":  "1000000000",
			"payer 5":  "1000000000",
			"6":        "0",
		},
		ChainID: "1337",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("token state (-want +got):\n%s", diff)
	}

	consts := []common.Hash{transferTypehash, receiveTypehash, cancelTypehash, eip712DomainTypehash}
	hashed := []common.Hash{
		want.TransferTypehash, want.ReceiveTypehash, want.CancelTypehash,
		crypto.Keccak256Hash([]byte("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)")),
	}
	if diff := cmp.Diff(hashed, consts); diff != "" {
		t.Errorf("test typehash constants (-type strings +constants):\n%s", diff)
	}
}

// result holds what a contract read returned, so that call(token.Name(opts))
// .must(t, "name") reads it in one line.
type result[T any] struct {
	v   T
	err error
}

func call[T any](v T, err error) result[T] { return result[T]{v, err} }

func (r result[T]) must(t *testing.T, what string) T {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	return r.v
}

func TestSimulatedTransferWithAuthorization(t *testing.T) {
	tests := []struct {
		name   string
		submit func(s *testchain.Simulated, opts *bind.TransactOpts, a authorization, sig []byte) (*types.Transaction, error)
	}{
		{"v r s", submitVRS},
		{"bytes", submitBytes},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testchain.NewSimulated(t)
			payer, payee := s.Addr(1), s.Addr(7)
			a := authorization{
				From:        payer,
				To:          payee,
				Value:       big.NewInt(1_250_000),
				ValidAfter:  big.NewInt(0),
				ValidBefore: big.NewInt(s.BlockTime(t).Add(time.Hour).Unix()),
				Nonce:       randomNonce(t),
			}
			sig := sign(t, s.Keys[1], a.digest(transferTypehash, s.Token))

			// The facilitator, dev key 0, pays the gas.
			tx, err := tc.submit(s, s.Transactor(t, 0), a, sig)
			if err != nil {
				t.Fatalf("transferWithAuthorization: %v", err)
			}
			receipt := s.Mine(t, tx)
			if receipt.Status != types.ReceiptStatusSuccessful {
				t.Fatalf("transferWithAuthorization reverted")
			}

			if diff := cmp.Diff([]authorizationEvent{{payer, a.Nonce}}, authorizationsUsed(s, receipt)); diff != "" {
				t.Errorf("AuthorizationUsed events (-want +got):\n%s", diff)
			}
			balances := map[string]string{
				"payer": s.BalanceOf(t, payer).String(),
				"payee": s.BalanceOf(t, payee).String(),
			}
			wantBalances := map[string]string{"payer": "998750000", "payee": "1250000"}
			if diff := cmp.Diff(wantBalances, balances); diff != "" {
				t.Errorf("balances (-want +got):\n%s", diff)
			}
			if used, err := s.TokenContract.AuthorizationState(&bind.CallOpts{Context: t.Context()}, payer, a.Nonce); err != nil {
				t.Fatalf("authorizationState: %v", err)
			} else if !used {
				t.Errorf("authorizationState = false after use, want true")
			}

			// Replaying the same authorization, in either form, fails.
			_, err = submitVRS(s, s.Transactor(t, 0), a, sig)
			wantRevert(t, err, reasonUsed)
			_, err = submitBytes(s, s.Transactor(t, 0), a, sig)
			wantRevert(t, err, reasonUsed)
		})
	}
}

func TestSimulatedTransferWithAuthorizationReverts(t *testing.T) {
	s := testchain.NewSimulated(t)
	now := s.BlockTime(t)
	valid := func() authorization {
		return authorization{
			From:        s.Addr(1),
			To:          s.Addr(7),
			Value:       big.NewInt(1_000_000),
			ValidAfter:  big.NewInt(0),
			ValidBefore: big.NewInt(now.Add(time.Hour).Unix()),
			Nonce:       randomNonce(t),
		}
	}
	tests := []struct {
		name   string
		auth   func(authorization) authorization // what is signed
		signer int
		// tamper changes what is submitted after signing, if set.
		tamper func(a *authorization, sig []byte)
		want   string
	}{
		{
			name: "expired",
			auth: func(a authorization) authorization {
				a.ValidBefore = big.NewInt(now.Add(-time.Minute).Unix())
				return a
			},
			signer: 1,
			want:   reasonExpired,
		},
		{
			name:   "not yet valid",
			auth:   func(a authorization) authorization { a.ValidAfter = big.NewInt(now.Add(time.Hour).Unix()); return a },
			signer: 1,
			want:   reasonNotYetValid,
		},
		{
			name:   "signed by someone else",
			signer: 2,
			want:   reasonInvalidSignature,
		},
		{
			name:   "value changed after signing",
			signer: 1,
			tamper: func(a *authorization, _ []byte) { a.Value = big.NewInt(2_000_000) },
			want:   reasonInvalidSignature,
		},
		{
			name:   "high s",
			signer: 1,
			tamper: func(_ *authorization, sig []byte) {
				s := new(big.Int).SetBytes(sig[32:64])
				copy(sig[32:64], math.U256Bytes(new(big.Int).Sub(crypto.S256().Params().N, s)))
				sig[64] ^= 1 // 27 <-> 28: the same signature, malleated
			},
			want: reasonHighS,
		},
		{
			name:   "v out of range",
			signer: 1,
			tamper: func(_ *authorization, sig []byte) { sig[64] += 2 },
			want:   reasonBadV,
		},
		{
			name: "more than the balance",
			auth: func(a authorization) authorization {
				a.Value = big.NewInt(testchain.SimulatedPayerBalance + 1)
				return a
			},
			signer: 1,
			want:   reasonBalance,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := valid()
			if tc.auth != nil {
				a = tc.auth(a)
			}
			sig := sign(t, s.Keys[tc.signer], a.digest(transferTypehash, s.Token))
			if tc.tamper != nil {
				tc.tamper(&a, sig)
			}
			_, err := submitBytes(s, s.Transactor(t, 0), a, sig)
			wantRevert(t, err, tc.want)
			_, err = submitVRS(s, s.Transactor(t, 0), a, sig)
			wantRevert(t, err, tc.want)
		})
	}
}

func TestSimulatedReceiveWithAuthorization(t *testing.T) {
	s := testchain.NewSimulated(t)
	payer, payee := s.Addr(1), s.Addr(7)
	a := authorization{
		From:        payer,
		To:          payee,
		Value:       big.NewInt(500_000),
		ValidAfter:  big.NewInt(0),
		ValidBefore: big.NewInt(s.BlockTime(t).Add(time.Hour).Unix()),
		Nonce:       randomNonce(t),
	}
	v, r, ss := splitSig(sign(t, s.Keys[1], a.digest(receiveTypehash, s.Token)))
	receive := func(from int) (*types.Transaction, error) {
		return s.TokenContract.ReceiveWithAuthorization(s.Transactor(t, from),
			a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, v, r, ss)
	}

	_, err := receive(0)
	wantRevert(t, err, reasonNotPayee)

	tx, err := receive(7)
	if err != nil {
		t.Fatalf("receiveWithAuthorization from the payee: %v", err)
	}
	receipt := s.Mine(t, tx)
	if receipt.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("receiveWithAuthorization reverted")
	}
	if diff := cmp.Diff([]authorizationEvent{{payer, a.Nonce}}, authorizationsUsed(s, receipt)); diff != "" {
		t.Errorf("AuthorizationUsed events (-want +got):\n%s", diff)
	}
	if got, want := s.BalanceOf(t, payee), big.NewInt(500_000); got.Cmp(want) != 0 {
		t.Errorf("payee balance = %s, want %s", got, want)
	}

	// A transfer signature is not a receive signature.
	b := a
	b.Nonce = randomNonce(t)
	v, r, ss = splitSig(sign(t, s.Keys[1], b.digest(transferTypehash, s.Token)))
	_, err = s.TokenContract.ReceiveWithAuthorization(s.Transactor(t, 7),
		b.From, b.To, b.Value, b.ValidAfter, b.ValidBefore, b.Nonce, v, r, ss)
	wantRevert(t, err, reasonInvalidSignature)
}

func TestSimulatedCancelAuthorization(t *testing.T) {
	s := testchain.NewSimulated(t)
	payer := s.Addr(1)
	nonce := randomNonce(t)
	cancelDigest := typedDataHash(domainSeparator("USD Coin", "2", s.ChainID, s.Token),
		crypto.Keccak256Hash(cancelTypehash[:], common.LeftPadBytes(payer[:], 32), nonce[:]))
	v, r, ss := splitSig(sign(t, s.Keys[1], cancelDigest))

	// Anyone may submit a cancellation the authorizer signed.
	tx, err := s.TokenContract.CancelAuthorization(s.Transactor(t, 0), payer, nonce, v, r, ss)
	if err != nil {
		t.Fatalf("cancelAuthorization: %v", err)
	}
	receipt := s.Mine(t, tx)
	if receipt.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("cancelAuthorization reverted")
	}
	var canceled []authorizationEvent
	for _, l := range receipt.Logs {
		if ev, err := s.TokenContract.ParseAuthorizationCanceled(*l); err == nil {
			canceled = append(canceled, authorizationEvent{ev.Authorizer, ev.Nonce})
		}
	}
	if diff := cmp.Diff([]authorizationEvent{{payer, nonce}}, canceled); diff != "" {
		t.Errorf("AuthorizationCanceled events (-want +got):\n%s", diff)
	}
	if used, err := s.TokenContract.AuthorizationState(&bind.CallOpts{Context: t.Context()}, payer, nonce); err != nil {
		t.Fatalf("authorizationState: %v", err)
	} else if !used {
		t.Errorf("authorizationState = false after cancel, want true")
	}

	// The canceled nonce can be neither used nor canceled again.
	a := authorization{
		From:        payer,
		To:          s.Addr(7),
		Value:       big.NewInt(1),
		ValidAfter:  big.NewInt(0),
		ValidBefore: big.NewInt(s.BlockTime(t).Add(time.Hour).Unix()),
		Nonce:       nonce,
	}
	_, err = submitBytes(s, s.Transactor(t, 0), a, sign(t, s.Keys[1], a.digest(transferTypehash, s.Token)))
	wantRevert(t, err, reasonUsed)
	_, err = s.TokenContract.CancelAuthorization(s.Transactor(t, 0), payer, nonce, v, r, ss)
	wantRevert(t, err, reasonUsed)
}

func TestSimulatedERC1271Payer(t *testing.T) {
	s := testchain.NewSimulated(t)
	owner := s.Keys[2]
	wallet := s.DeployWallet(t, s.Addr(2))
	s.Mint(t, wallet, big.NewInt(3_000_000))
	payee := s.Addr(8)

	a := authorization{
		From:        wallet,
		To:          payee,
		Value:       big.NewInt(2_000_000),
		ValidAfter:  big.NewInt(0),
		ValidBefore: big.NewInt(s.BlockTime(t).Add(time.Hour).Unix()),
		Nonce:       randomNonce(t),
	}
	digest := a.digest(transferTypehash, s.Token)

	// A signature by anyone but the owner is refused by the wallet.
	_, err := submitBytes(s, s.Transactor(t, 0), a, sign(t, s.Keys[3], digest))
	wantRevert(t, err, reasonInvalidSignature)

	tx, err := submitBytes(s, s.Transactor(t, 0), a, sign(t, owner, digest))
	if err != nil {
		t.Fatalf("transferWithAuthorization from the wallet: %v", err)
	}
	receipt := s.Mine(t, tx)
	if receipt.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("transferWithAuthorization from the wallet reverted")
	}
	if diff := cmp.Diff([]authorizationEvent{{wallet, a.Nonce}}, authorizationsUsed(s, receipt)); diff != "" {
		t.Errorf("AuthorizationUsed events (-want +got):\n%s", diff)
	}
	got := map[string]string{
		"wallet": s.BalanceOf(t, wallet).String(),
		"payee":  s.BalanceOf(t, payee).String(),
	}
	if diff := cmp.Diff(map[string]string{"wallet": "1000000", "payee": "2000000"}, got); diff != "" {
		t.Errorf("balances (-want +got):\n%s", diff)
	}
}

func TestSimulatedAutoCommit(t *testing.T) {
	s := testchain.NewSimulated(t)
	s.StartAutoCommit(t, 5*time.Millisecond)

	// Like code under test: send, then wait for the receipt without sealing.
	tx, err := s.TokenContract.Transfer(s.Transactor(t, 1), s.Addr(9), big.NewInt(42))
	if err != nil {
		t.Fatalf("transfer: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	receipt, err := bind.WaitMined(ctx, s.Client, tx)
	if err != nil {
		t.Fatalf("wait for transfer: %v", err)
	}
	if receipt.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("transfer reverted")
	}
	if got := s.BalanceOf(t, s.Addr(9)); got.Cmp(big.NewInt(42)) != 0 {
		t.Errorf("payee balance = %s, want 42", got)
	}

	// Helpers that seal blocks themselves still work alongside the loop.
	s.Mint(t, s.Addr(9), big.NewInt(8))
	if got := s.BalanceOf(t, s.Addr(9)); got.Cmp(big.NewInt(50)) != 0 {
		t.Errorf("payee balance after mint = %s, want 50", got)
	}
}

// authorization is an EIP-3009 TransferWithAuthorization or
// ReceiveWithAuthorization message.
type authorization struct {
	From, To                       common.Address
	Value, ValidAfter, ValidBefore *big.Int
	Nonce                          [32]byte
}

// digest computes the EIP-712 digest of a under typehash for the test token
// at token on chain 1337, by hand.
func (a authorization) digest(typehash common.Hash, token common.Address) common.Hash {
	structHash := crypto.Keccak256Hash(
		typehash[:],
		common.LeftPadBytes(a.From[:], 32),
		common.LeftPadBytes(a.To[:], 32),
		math.U256Bytes(new(big.Int).Set(a.Value)),
		math.U256Bytes(new(big.Int).Set(a.ValidAfter)),
		math.U256Bytes(new(big.Int).Set(a.ValidBefore)),
		a.Nonce[:],
	)
	return typedDataHash(domainSeparator("USD Coin", "2", big.NewInt(1337), token), structHash)
}

func domainSeparator(name, version string, chainID *big.Int, contract common.Address) common.Hash {
	return crypto.Keccak256Hash(
		eip712DomainTypehash[:],
		crypto.Keccak256([]byte(name)),
		crypto.Keccak256([]byte(version)),
		math.U256Bytes(new(big.Int).Set(chainID)),
		common.LeftPadBytes(contract[:], 32),
	)
}

func typedDataHash(domain, structHash common.Hash) common.Hash {
	return crypto.Keccak256Hash([]byte{0x19, 0x01}, domain[:], structHash[:])
}

// sign signs digest with key and returns r || s || v with v in {27, 28}.
func sign(t *testing.T, key *ecdsa.PrivateKey, digest common.Hash) []byte {
	t.Helper()
	sig, err := crypto.Sign(digest[:], key)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	sig[64] += 27
	return sig
}

func splitSig(sig []byte) (v uint8, r, s [32]byte) {
	copy(r[:], sig[:32])
	copy(s[:], sig[32:64])
	return sig[64], r, s
}

func randomNonce(t *testing.T) [32]byte {
	t.Helper()
	var n [32]byte
	if _, err := rand.Read(n[:]); err != nil {
		t.Fatalf("random nonce: %v", err)
	}
	return n
}

func submitVRS(s *testchain.Simulated, opts *bind.TransactOpts, a authorization, sig []byte) (*types.Transaction, error) {
	v, r, ss := splitSig(sig)
	return s.TokenContract.TransferWithAuthorization(opts, a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, v, r, ss)
}

func submitBytes(s *testchain.Simulated, opts *bind.TransactOpts, a authorization, sig []byte) (*types.Transaction, error) {
	return s.TokenContract.TransferWithAuthorization0(opts, a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, a.Nonce, sig)
}

type authorizationEvent struct {
	Authorizer common.Address
	Nonce      [32]byte
}

func authorizationsUsed(s *testchain.Simulated, receipt *types.Receipt) []authorizationEvent {
	var events []authorizationEvent
	for _, l := range receipt.Logs {
		if ev, err := s.TokenContract.ParseAuthorizationUsed(*l); err == nil {
			events = append(events, authorizationEvent{ev.Authorizer, ev.Nonce})
		}
	}
	return events
}

// wantRevert checks that err is a node error carrying a revert with reason.
// The bindings estimate gas before sending, so a reverting call fails there
// and nothing is sent.
func wantRevert(t *testing.T, err error, reason string) {
	t.Helper()
	if err == nil {
		t.Errorf("no error, want revert %q", reason)
		return
	}
	var dataErr rpc.DataError
	if !errors.As(err, &dataErr) {
		t.Errorf("error %q has no revert data, want revert %q", err, reason)
		return
	}
	data, _ := dataErr.ErrorData().(string)
	got, uerr := abi.UnpackRevert(common.FromHex(data))
	if uerr != nil {
		t.Errorf("error %q: unpack revert data %q: %v", err, data, uerr)
		return
	}
	if got != reason {
		t.Errorf("revert reason = %q, want %q", got, reason)
	}
}
