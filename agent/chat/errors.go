package chat

// The error types the model activity fails with, as Temporal application
// error types: a workflow tells them apart with
// temporal.ApplicationError.Type(). Only ModelUnavailable is retried.
const (
	// ModelUnavailable: rate limited (429), a server error (5xx), the
	// connection lost or timed out. Retried, after the server's
	// Retry-After when it gave one.
	ModelUnavailable = "ModelUnavailable"
	// NoModel: no model configured, or the server does not serve it.
	NoModel = "NoModel"
	// ModelAuth: the server refused the API key (401, 403).
	ModelAuth = "ModelAuth"
	// ModelRejected: the server refused the request as malformed (400,
	// other 4xx), a context too long say. Retrying it cannot help.
	ModelRejected = "ModelRejected"
	// BadModelAnswer: the answer could not be used (a tool call without
	// a name, nothing at all).
	BadModelAnswer = "BadModelAnswer"
	// BadConversation: a conversation segment is missing, or its bytes
	// are not those its hash names.
	BadConversation = "BadConversation"
	// AnswerTooLarge: the answer passed one of the model activity's
	// bounds (its text, a tool call's arguments, the number of calls);
	// the activity stopped reading it there. Asking again would most
	// likely get the same.
	AnswerTooLarge = "AnswerTooLarge"
)

// NonRetryable lists the error types a retry cannot fix, for a retry
// policy's NonRetryableErrorTypes.
func NonRetryable() []string {
	return []string{NoModel, ModelAuth, ModelRejected, BadModelAnswer, BadConversation, AnswerTooLarge}
}
