// Package chat is the plain data the coding agent's workflow and its
// model activity share: messages, tool calls and tool definitions, token
// usage, the model activity's request and response. It knows nothing of
// Temporal or of any model client; the kinds of error the model activity
// fails with are berth's (package errdefs: ModelUnavailable, NoModel,
// ...).
//
// # Conversations
//
// A conversation grows with every turn, and a model call needs all of
// it. Carried whole in each call's input it would enter workflow history
// once per call, quadratically. Instead it lives in the blob store as
// segments, immutable JSON objects named by their SHA-256 under
// SegmentPrefix:
//
//	conversations/<conversation>/<sha256 hex>
//
// A Request names the segments so far (key and hash each: the activity
// refuses one whose bytes do not match) and carries inline only the
// messages new since (a user's message, the tool results of the last
// step). The activity stores those and its answer as a new segment and
// returns the whole list in Response.Conversation, for the next call.
// Every message thus enters history about twice, however long the
// conversation; and as segments are content-addressed and never
// rewritten, a retried call, a fork or a continue-as-new share them.
// When the list grows past MaxSegments the activity merges it into one
// segment, so that a call never reads more than a few objects.
package chat
