// Package client is a Go client of a callsheet node's HTTP API
// (docs/spec.md §8, docs/clients.md): open sessions, post turns in
// callsheet's own shape or a model provider's (OpenAI Chat, OpenAI
// Responses, Anthropic), read a session's events with resume, decide
// approvals and answer questions.
//
// A turn's id is minted before its first attempt, so a post that meets a
// 503 or a dropped connection is sent again with the same id: the node
// answers a repeated turn id from its record and runs nothing twice.
// Errors the API answers are *Error values carrying its code.
//
// A streamed turn (Session.OpenTurn, OpenTurnNative) posts each call as
// the model completes it, so it starts while the model still streams
// (docs/clients.md, "Streamed turns").
package client
