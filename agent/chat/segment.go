package chat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// SegmentPrefix is where conversations live in the blob store.
const SegmentPrefix = "conversations/"

// MaxSegments is how many segments a conversation may have before the
// model activity merges them into one.
const MaxSegments = 16

// ErrBadSegment says that a segment is missing or does not match its hash.
var ErrBadSegment = errors.New("bad conversation segment")

// segment is a segment's stored form.
type segment struct {
	Messages []Message `json:"messages"`
}

// SaveSegment stores msgs as a segment of the conversation conv. Saving
// the same messages again writes the same key.
func SaveSegment(ctx context.Context, b *blob.Bucket, conv string, msgs []Message) (Segment, error) {
	if err := CheckConversation(conv); err != nil {
		return Segment{}, err
	}
	data, err := json.Marshal(segment{Messages: msgs})
	if err != nil {
		return Segment{}, err
	}
	sum := sha256.Sum256(data)
	seg := Segment{SHA256: hex.EncodeToString(sum[:]), Messages: len(msgs)}
	seg.Key = SegmentPrefix + conv + "/" + seg.SHA256
	if err := b.WriteAll(ctx, seg.Key, data, &blob.WriterOptions{ContentType: "application/json"}); err != nil {
		return Segment{}, fmt.Errorf("chat: store segment %s: %w", seg.Key, err)
	}
	return seg, nil
}

// CheckConversation refuses a conversation name that is not one path
// element.
func CheckConversation(conv string) error {
	if conv == "" || strings.ContainsAny(conv, "/\\\x00") || conv == "." || conv == ".." {
		return fmt.Errorf("chat: bad conversation name %q: one path element, such as a session id", conv)
	}
	return nil
}

// Load reads the messages of segments, in order, checking each against
// its hash. A missing or altered segment is an error wrapping
// ErrBadSegment.
func Load(ctx context.Context, b *blob.Bucket, segs []Segment) ([]Message, error) {
	var msgs []Message
	for _, seg := range segs {
		data, err := b.ReadAll(ctx, seg.Key)
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, fmt.Errorf("%w: %s is missing", ErrBadSegment, seg.Key)
		}
		if err != nil {
			return nil, fmt.Errorf("chat: read segment %s: %w", seg.Key, err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != seg.SHA256 {
			return nil, fmt.Errorf("%w: %s does not match its SHA-256 %s", ErrBadSegment, seg.Key, seg.SHA256)
		}
		var s segment
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadSegment, seg.Key, err)
		}
		if len(s.Messages) != seg.Messages {
			return nil, fmt.Errorf("%w: %s holds %d messages, not %d", ErrBadSegment, seg.Key, len(s.Messages), seg.Messages)
		}
		msgs = append(msgs, s.Messages...)
	}
	return msgs, nil
}

// Append stores msgs as a new segment after segs, whose messages (as
// Load read them) are loaded, and returns the conversation's new list of
// segments. Past MaxSegments, the whole conversation becomes one segment.
func Append(ctx context.Context, b *blob.Bucket, conv string, segs []Segment, loaded, msgs []Message) ([]Segment, error) {
	if len(segs)+1 > MaxSegments {
		all := append(append([]Message(nil), loaded...), msgs...)
		seg, err := SaveSegment(ctx, b, conv, all)
		if err != nil {
			return nil, err
		}
		return []Segment{seg}, nil
	}
	seg, err := SaveSegment(ctx, b, conv, msgs)
	if err != nil {
		return nil, err
	}
	return append(append([]Segment(nil), segs...), seg), nil
}
