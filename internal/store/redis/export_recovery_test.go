package redis

// Exported for the recovery tests of package redis_test.

// RecoveryKey names the Redis key of kind ("record", "index", "fence") for
// the store key or operation id key.
func (db *DB) RecoveryKey(kind, key string) string {
	switch kind {
	case "record":
		return db.keys.recovery(key)
	case "index":
		return db.keys.recoveryOp(key)
	case "fence":
		return db.keys.recoveryFence()
	}
	panic("unknown recovery key kind " + kind)
}
