package agentcorefake

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ac "github.com/aws/aws-sdk-go-v2/service/bedrockagentcore"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"
	"github.com/aws/smithy-go"
)

const (
	keyID  = "AKIAFAKETEST00000001"
	secret = "fake/test/secret"
)

func newServer(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Farm, opts.AccessKeyID, opts.SecretAccessKey = farm, keyID, secret
	s, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if v := s.Violations(); len(v) > 0 {
			t.Errorf("violations:\n%s", strings.Join(v, "\n"))
		}
	})
	return s
}

// client is the official SDK's client of s, with the keys given.
func client(s *Server, id, key string) *ac.Client {
	return ac.New(ac.Options{
		Region: "us-west-2", BaseEndpoint: aws.String(s.URL()),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: id, SecretAccessKey: key}, nil
		}),
		RetryMaxAttempts: 1,
	})
}

var ci = aws.String(DefaultIdentifier)

func start(t *testing.T, c *ac.Client, name string, timeout int32) string {
	t.Helper()
	out, err := c.StartCodeInterpreterSession(t.Context(), &ac.StartCodeInterpreterSessionInput{
		CodeInterpreterIdentifier: ci, Name: aws.String(name), SessionTimeoutSeconds: aws.Int32(timeout)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.SessionId)
}

func invoke(t *testing.T, c *ac.Client, id string, tool types.ToolName, args types.ToolArguments) types.CodeInterpreterResult {
	t.Helper()
	out, err := c.InvokeCodeInterpreter(t.Context(), &ac.InvokeCodeInterpreterInput{CodeInterpreterIdentifier: ci, SessionId: &id, Name: tool, Arguments: &args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	defer out.GetStream().Close()
	var res types.CodeInterpreterResult
	n := 0
	for ev := range out.GetStream().Events() {
		if r, ok := ev.(*types.CodeInterpreterStreamOutputMemberResult); ok {
			res, n = r.Value, n+1
		}
	}
	if err := out.GetStream().Err(); err != nil || n != 1 {
		t.Fatalf("%s: %d results, stream error %v", tool, n, err)
	}
	return res
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// TestSessions drives the session operations through the SDK: start,
// get, list (paginated, READY ones), stop, a client token seen before,
// the quota, the end at the timeout.
func TestSessions(t *testing.T) {
	s := newServer(t, Options{MaxSessions: 3})
	c := client(s, keyID, secret)
	a := start(t, c, "one", 60)
	tok := aws.String(strings.Repeat("t", 40))
	o1, err := c.StartCodeInterpreterSession(t.Context(), &ac.StartCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci, Name: aws.String("two"), ClientToken: tok})
	if err != nil {
		t.Fatal(err)
	}
	o2, err := c.StartCodeInterpreterSession(t.Context(), &ac.StartCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci, Name: aws.String("two"), ClientToken: tok})
	if err != nil || aws.ToString(o2.SessionId) != aws.ToString(o1.SessionId) {
		t.Fatalf("a start with a token seen before: %v, %v; want the first session", o2, err)
	}
	short := start(t, c, "short", 2)
	if _, err := c.StartCodeInterpreterSession(t.Context(), &ac.StartCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci}); code(err) != "ServiceQuotaExceededException" {
		t.Errorf("a fourth session of three: %v", err)
	}
	g, err := c.GetCodeInterpreterSession(t.Context(), &ac.GetCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci, SessionId: &a})
	if err != nil || aws.ToString(g.Name) != "one" || aws.ToInt32(g.SessionTimeoutSeconds) != 60 || g.Status != types.CodeInterpreterSessionStatusReady || time.Since(*g.CreatedAt) > time.Minute {
		t.Errorf("get: %+v, %v", g, err)
	}
	var seen []string
	var next *string
	for {
		l, err := c.ListCodeInterpreterSessions(t.Context(), &ac.ListCodeInterpreterSessionsInput{CodeInterpreterIdentifier: ci, MaxResults: aws.Int32(2), NextToken: next, Status: types.CodeInterpreterSessionStatusReady})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range l.Items {
			seen = append(seen, aws.ToString(it.Name))
		}
		if next = l.NextToken; next == nil {
			break
		}
	}
	if len(seen) != 3 {
		t.Errorf("listed %v, want 3 sessions", seen)
	}
	time.Sleep(3 * time.Second)
	g, err = c.GetCodeInterpreterSession(t.Context(), &ac.GetCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci, SessionId: &short})
	if err != nil || g.Status != types.CodeInterpreterSessionStatusTerminated || s.Machine(short) != nil {
		t.Errorf("a session past its timeout: %+v, %v", g, err)
	}
	if _, err := c.StopCodeInterpreterSession(t.Context(), &ac.StopCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci, SessionId: &a}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StopCodeInterpreterSession(t.Context(), &ac.StopCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci, SessionId: &a}); code(err) != "ResourceNotFoundException" {
		t.Errorf("a second stop: %v", err)
	}
	if _, err := c.StartCodeInterpreterSession(t.Context(), &ac.StartCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci, SessionTimeoutSeconds: aws.Int32(28801)}); code(err) != "ValidationException" {
		t.Errorf("a timeout over 8 h: %v", err)
	}
	s.Violations() // that one was meant
	if n := s.Requests("StartCodeInterpreterSession"); n != 6 {
		t.Errorf("counted %d starts, want 6", n)
	}
}

// TestTools runs every tool berth uses in a real machine, its result
// read from the event stream by the SDK.
func TestTools(t *testing.T) {
	s := newServer(t, Options{})
	c := client(s, keyID, secret)
	id := start(t, c, "tools", 120)
	r := invoke(t, c, id, types.ToolNameExecuteCommand, types.ToolArguments{Command: aws.String("echo out; echo err >&2; id -u; exit 3")})
	sc := r.StructuredContent
	if sc == nil || aws.ToString(sc.Stdout) != "out\n0\n" || aws.ToString(sc.Stderr) != "err\n" || aws.ToInt32(sc.ExitCode) != 3 || !aws.ToBool(r.IsError) {
		t.Errorf("executeCommand: %+v", sc)
	}
	r = invoke(t, c, id, types.ToolNameWriteFiles, types.ToolArguments{Content: []types.InputContentBlock{
		{Path: aws.String("/opt/x/a.txt"), Text: aws.String("hello")}, {Path: aws.String("/opt/x/b.bin"), Blob: []byte{0, 1, 2}}}})
	if aws.ToBool(r.IsError) {
		t.Fatalf("writeFiles: %+v", r)
	}
	r = invoke(t, c, id, types.ToolNameReadFiles, types.ToolArguments{Paths: []string{"/opt/x/a.txt", "/opt/x/b.bin"}})
	if len(r.Content) != 2 || aws.ToString(r.Content[0].Resource.Text) != "hello" || string(r.Content[1].Resource.Blob) != "\x00\x01\x02" {
		t.Errorf("readFiles: %+v", r.Content)
	}
	r = invoke(t, c, id, types.ToolNameListFiles, types.ToolArguments{DirectoryPath: aws.String("/opt/x")})
	if len(r.Content) != 2 {
		t.Errorf("listFiles: %+v", r.Content)
	}
	invoke(t, c, id, types.ToolNameRemoveFiles, types.ToolArguments{Paths: []string{"/opt/x/a.txt"}})
	r = invoke(t, c, id, types.ToolNameReadFiles, types.ToolArguments{Paths: []string{"/opt/x/a.txt"}})
	if !aws.ToBool(r.IsError) {
		t.Errorf("readFiles of a removed file: %+v", r)
	}
	r = invoke(t, c, id, types.ToolNameStartCommandExecution, types.ToolArguments{Command: aws.String("sleep 0.2; echo done")})
	task := r.StructuredContent.TaskId
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = invoke(t, c, id, types.ToolNameGetTask, types.ToolArguments{TaskId: task})
		if r.StructuredContent.TaskStatus == types.TaskStatusCompleted || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r.StructuredContent.TaskStatus != types.TaskStatusCompleted || aws.ToString(r.StructuredContent.Stdout) != "done\n" {
		t.Errorf("getTask: %+v", r.StructuredContent)
	}
	r = invoke(t, c, id, types.ToolNameStartCommandExecution, types.ToolArguments{Command: aws.String("sleep 60")})
	r = invoke(t, c, id, types.ToolNameStopTask, types.ToolArguments{TaskId: r.StructuredContent.TaskId})
	if r.StructuredContent.TaskStatus != types.TaskStatusCanceled {
		t.Errorf("stopTask: %+v", r.StructuredContent)
	}
	r = invoke(t, c, id, types.ToolNameExecuteCode, types.ToolArguments{Code: aws.String("print(6*7)"), Language: types.ProgrammingLanguagePython})
	if aws.ToString(r.StructuredContent.Stdout) != "42\n" {
		t.Errorf("executeCode: %+v", r.StructuredContent)
	}
	if n := s.Requests("executeCommand"); n != 1 {
		t.Errorf("counted %d executeCommands, want 1", n)
	}
	s.Vanish(id)
	_, err := c.InvokeCodeInterpreter(t.Context(), &ac.InvokeCodeInterpreterInput{CodeInterpreterIdentifier: ci, SessionId: &id,
		Name: types.ToolNameExecuteCommand, Arguments: &types.ToolArguments{Command: aws.String("true")}})
	if code(err) != "ResourceNotFoundException" {
		t.Errorf("a tool of a vanished session: %v", err)
	}
}

// TestAuthAndFaults: a request signed with another key, or the wrong
// secret, is refused; an injected exception is answered as the
// service's; a dropped answer's work is done.
func TestAuthAndFaults(t *testing.T) {
	s := newServer(t, Options{})
	if _, err := client(s, keyID, "wrong").ListCodeInterpreterSessions(t.Context(), &ac.ListCodeInterpreterSessionsInput{CodeInterpreterIdentifier: ci}); code(err) != "InvalidSignatureException" {
		t.Errorf("the wrong secret: %v", err)
	}
	if _, err := client(s, "AKIAOTHER", secret).ListCodeInterpreterSessions(t.Context(), &ac.ListCodeInterpreterSessionsInput{CodeInterpreterIdentifier: ci}); code(err) != "UnrecognizedClientException" {
		t.Errorf("another key: %v", err)
	}
	if n := s.Requests("unauthorized"); n != 2 {
		t.Errorf("counted %d refused, want 2", n)
	}
	c := client(s, keyID, secret)
	s.Inject(Fault{Op: "ListCodeInterpreterSessions", Exception: "ThrottlingException"})
	if _, err := c.ListCodeInterpreterSessions(t.Context(), &ac.ListCodeInterpreterSessionsInput{CodeInterpreterIdentifier: ci}); code(err) != "ThrottlingException" {
		t.Errorf("throttled: %v", err)
	}
	s.Inject(Fault{Op: "StartCodeInterpreterSession", Drop: true})
	if _, err := c.StartCodeInterpreterSession(t.Context(), &ac.StartCodeInterpreterSessionInput{CodeInterpreterIdentifier: ci, Name: aws.String("dropped")}); err == nil {
		t.Error("a dropped answer came")
	}
	if len(s.Sessions()) != 1 {
		t.Errorf("the dropped start made %d sessions, want 1", len(s.Sessions()))
	}
	if _, err := c.ListCodeInterpreterSessions(t.Context(), &ac.ListCodeInterpreterSessionsInput{CodeInterpreterIdentifier: aws.String("nope")}); code(err) != "ResourceNotFoundException" {
		t.Errorf("an unknown code interpreter: %v", err)
	}
}
