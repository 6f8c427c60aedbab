package natslog

import "github.com/callsheet/callsheet/internal/jsensure"

// The log's streams and buckets are opened as every node of a fleet opens
// them (internal/jsensure).
var (
	ensureStream  = jsensure.Stream
	ensureKV      = jsensure.KV
	ensureObjects = jsensure.Objects
)
