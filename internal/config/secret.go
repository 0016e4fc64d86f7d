package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxSecretBytes bounds what ReadSecret reads from a file: keys and tokens are
// far shorter, and a path such as /dev/zero must not be read forever.
const MaxSecretBytes = 4 << 10

// ReadSecret returns a secret from the file at path, or from the environment
// variable envName through getenv: exactly one of path and envName must be
// set. The value is trimmed of surrounding white space and must not be empty.
// Errors name the file or the variable, never the value or any part of it.
func ReadSecret(path, envName string, getenv func(string) string) (string, error) {
	switch {
	case path != "" && envName != "":
		return "", fmt.Errorf("secret from file %s and from $%s: name only one", path, envName)
	case path != "":
		return readSecretFile(path)
	case envName != "":
		if getenv == nil {
			return "", fmt.Errorf("secret from $%s: no environment to read", envName)
		}
		v := strings.TrimSpace(getenv(envName))
		if v == "" {
			return "", fmt.Errorf("environment variable %s is not set or is empty", envName)
		}
		return v, nil
	}
	return "", errors.New("no secret source: name a file or an environment variable")
}

func readSecretFile(path string) (string, error) {
	fh, err := os.Open(path) //nolint:gosec // G304: the operator names the secret file; reading it is the point.
	if err != nil {
		return "", fmt.Errorf("read secret file: %w", err) // a *PathError: the path and the cause
	}
	b, err := io.ReadAll(io.LimitReader(fh, MaxSecretBytes+1))
	_ = fh.Close() // opened read-only: closing cannot lose data
	if err != nil {
		return "", fmt.Errorf("read secret file: %w", err) // a *PathError: the path and the cause
	}
	if len(b) > MaxSecretBytes {
		return "", fmt.Errorf("secret file %s is larger than %d bytes", path, MaxSecretBytes)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("secret file %s is empty", path)
	}
	return v, nil
}

// Key returns the in-process facilitator's signer key, as written in its file
// or variable (hex; the caller decodes it).
func (f Facilitator) Key(getenv func(string) string) (string, error) {
	return ReadSecret(f.KeyFile, f.KeyEnv, getenv)
}

// APIKey returns the upstream's API key, or "" when it names no source (a
// local server that wants none).
func (u Upstream) APIKey(getenv func(string) string) (string, error) {
	if u.APIKeyFile == "" && u.APIKeyEnv == "" {
		return "", nil
	}
	return ReadSecret(u.APIKeyFile, u.APIKeyEnv, getenv)
}

// RPC returns the node's URL: RPCURL, or the value of the variable RPCURLEnv
// names, checked like RPCURL is. Errors never repeat the URL (it may carry an
// API key).
func (n Network) RPC(getenv func(string) string) (string, error) {
	if n.RPCURL != "" {
		return n.RPCURL, nil
	}
	if n.RPCURLEnv == "" {
		return "", errors.New("network: no rpc_url or rpc_url_env")
	}
	v, err := ReadSecret("", n.RPCURLEnv, getenv)
	if err != nil {
		return "", err
	}
	if msg := checkURL(v, "http", "https", "ws", "wss"); msg != "" {
		return "", fmt.Errorf("network.rpc_url_env: the value of %s %s", n.RPCURLEnv, msg)
	}
	return v, nil
}

// StoreDSN returns the store's backend (StoreSQLite, StorePostgres or
// StoreRedis) and its DSN: Store.DSN, or the value of the variable DSNEnv
// names, checked the same way. Errors never repeat the DSN (it may carry a
// password).
func (s Store) StoreDSN(getenv func(string) string) (backend, dsn string, err error) {
	dsn = s.DSN
	if s.DSNEnv != "" {
		if dsn, err = ReadSecret("", s.DSNEnv, getenv); err != nil {
			return "", "", fmt.Errorf("store.dsn_env: %w", err)
		}
	}
	backend, msg := checkDSN(dsn)
	if msg != "" {
		if s.DSNEnv != "" {
			return "", "", fmt.Errorf("store.dsn_env: the value of %s %s", s.DSNEnv, msg)
		}
		return "", "", fmt.Errorf("store.dsn: %s", msg)
	}
	return backend, dsn, nil
}
