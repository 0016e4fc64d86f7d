package redis

import goredis "github.com/redis/go-redis/v9"

// Exported for the tests of package redis_test.

// ParseURL is parseURL.
func ParseURL(rawURL string) (*goredis.Options, string, error) { return parseURL(rawURL) }

// Key names the Redis key of kind ("settlement", "settlement-fence",
// "settlement-unresolved", "settlement-recent", "payment", "payment-fence")
// for the store key key. The settlement lists come in three kinds each:
// "settlement-unresolved" is the set of every network,
// "settlement-unresolved-of" the set of the network key, and
// "settlement-unresolved-legacy" the one set older versions kept; the same
// for "settlement-recent".
func (db *DB) Key(kind, key string) string {
	switch kind {
	case "settlement":
		return db.keys.settlement(key)
	case "settlement-fence":
		return db.keys.settlementFence()
	case "settlement-unresolved":
		return db.keys.unresolvedAll()
	case "settlement-unresolved-of":
		return db.keys.unresolvedOf(key)
	case "settlement-unresolved-legacy":
		return db.keys.unresolvedLegacy()
	case "settlement-recent":
		return db.keys.recentAll()
	case "settlement-recent-of":
		return db.keys.recentOf(key)
	case "settlement-recent-legacy":
		return db.keys.recentLegacy()
	case "payment":
		return db.keys.payment(key)
	case "payment-fence":
		return db.keys.paymentFence()
	}
	panic("unknown key kind " + kind)
}

// ExpiryMargin is expiryMargin.
const ExpiryMargin = expiryMargin
