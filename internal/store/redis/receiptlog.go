package redis

import goredis "github.com/redis/go-redis/v9"

// receiptLogScripts are the scripts of store.Receipts and store.ReceiptLog.
var receiptLogScripts []*goredis.Script
