package gateway

import "github.com/llm4agents/llm4agents/internal/paywall"

// RecordKey exposes the recovery record key (D14) to the external tests.
var RecordKey = paywall.RecordKey
