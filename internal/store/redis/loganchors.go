package redis

import goredis "github.com/redis/go-redis/v9"

// logAnchorScripts are the scripts of store.LogAnchors.
var logAnchorScripts []*goredis.Script
