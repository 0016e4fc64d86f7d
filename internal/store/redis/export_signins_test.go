package redis

// Exported for the sign-in tests of package redis_test.

// SignInKey names the Redis key of kind ("nonce", "session", "nonces",
// "sessions") for the nonce or the session hash key.
func (db *DB) SignInKey(kind, key string) string {
	switch kind {
	case "nonce":
		return db.keys.signInNonce(nonceName(key))
	case "session":
		return db.keys.signInSession(key)
	case "nonces":
		return db.keys.signInNonces()
	case "sessions":
		return db.keys.signInSessions()
	}
	panic("unknown sign-in key kind " + kind)
}
