// Package model is the coding agent's model activity: one call to an
// OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM, Ollama,
// llama.cpp, LiteLLM...), with tools, streamed, through openai-go.
//
// # Configuration
//
// The worker's environment configures it, never workflow input:
// OPENAI_API_KEY, OPENAI_BASE_URL (default https://api.openai.com/v1)
// and BERTH_MODEL (ConfigFromEnv). The key stays in the worker: it is
// neither in history nor in any sandbox. New refuses, in one line, a
// configuration that cannot work (no model set, no key for OpenAI, a
// URL that is not http). Check says in one line what is wrong with the
// server now: it cannot be reached, refuses the key, does not serve
// the model; or ErrUnlisted when it lists no models (404, 405, 501, an
// answer not JSON), and the first call will tell. The model is
// optional: a host starts whatever Check says, and each call tries the
// server again. Status (StatusActivityName) is Check's answer for
// front ends: ready, unknown, unavailable and why.
//
// # The activity
//
// Complete (registered as ActivityName) reads the conversation's
// segments from the blob store (see package chat; a Model keeps those
// it has read and checked in memory, so that a turn's steps do not read
// the whole conversation again each), streams the answer,
// heartbeating with its Progress while it does and writing its text to
// Request.Stream as it comes, stores the new messages and the answer as
// a segment, and returns the answer with its token usage. Its failures
// carry chat's error types: rate limits (429), server errors (5xx), a
// lost connection or a call past Config.Timeout are ModelUnavailable,
// retried by Temporal, after the server's Retry-After when it gave one;
// a refused key, a refused request, an unknown model are not retried.
// openai-go's own retries are off: Temporal's retry policy
// (ActivityOptions) is the only one.
//
//	m, err := model.New(model.ConfigFromEnv(), bucket)
//	if err := m.Check(ctx); err != nil { log.Warn("the model is not usable yet", "reason", err) }
//	m.Register(w)
package model
