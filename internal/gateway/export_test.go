package gateway

// RecordKey exposes the recovery record key (D14) to the external tests.
var RecordKey = recordKey
