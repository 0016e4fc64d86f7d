package redis

import goredis "github.com/redis/go-redis/v9"

// Exported for the tests of package redis_test.

// ParseURL is parseURL.
func ParseURL(rawURL string) (*goredis.Options, string, error) { return parseURL(rawURL) }

// Key names the Redis key of kind ("settlement", "settlement-fence",
// "settlement-unresolved", "settlement-recent", "payment", "payment-fence")
// for the store key key.
func (db *DB) Key(kind, key string) string {
	switch kind {
	case "settlement":
		return db.keys.settlement(key)
	case "settlement-fence":
		return db.keys.settlementFence()
	case "settlement-unresolved":
		return db.keys.unresolved()
	case "settlement-recent":
		return db.keys.recent()
	case "payment":
		return db.keys.payment(key)
	case "payment-fence":
		return db.keys.paymentFence()
	}
	panic("unknown key kind " + kind)
}

// ExpiryMargin is expiryMargin.
const ExpiryMargin = expiryMargin
